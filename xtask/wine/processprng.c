/* Test-only stand-in for bcryptprimitives.dll!ProcessPrng, which Rust >= 1.78 programs
 * import and Wine 8.0 lacks. Installed into the test Wine prefix's system32; never into
 * a package. */
#include <windows.h>
#include <bcrypt.h>

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    return BCryptGenRandom(NULL, data, (ULONG)len, BCRYPT_USE_SYSTEM_PREFERRED_RNG) == 0;
}
