//! `response_format: "flac"` of the speech endpoint: the 16-bit samples a WAV answer
//! would carry, compressed losslessly by `flacenc` (pure Rust, Apache-2.0) into one
//! FLAC stream. A FLAC's STREAMINFO header states the length and MD5 of the whole
//! audio, so the answer is made whole, never streamed.

/// A mono FLAC file of 16-bit little-endian PCM `pcm` (as [`pcm16_le`] makes it) at
/// `rate`. The samples decode back bit for bit (symphonia, libFLAC, FFmpeg).
///
/// [`pcm16_le`]: audiocpp_engine::output::pcm16_le
pub fn encode(pcm: &[u8], rate: u32) -> Result<Vec<u8>, String> {
    use flacenc::component::BitRepr;
    use flacenc::error::Verify;

    let samples: Vec<i32> = pcm
        .chunks_exact(2)
        .map(|b| i32::from(i16::from_le_bytes([b[0], b[1]])))
        .collect();
    let config = flacenc::config::Encoder::default()
        .into_verified()
        .map_err(|(_, e)| format!("FLAC encoder settings: {e}"))?;
    let source = flacenc::source::MemSource::from_samples(&samples, 1, 16, rate as usize);
    let block = config.block_size;
    let mut stream = flacenc::encode_with_fixed_block_size(&config, source, block)
        .map_err(|e| format!("encoding FLAC: {e}"))?;
    // flacenc states the shorter last block as the minimum block size; the format leaves
    // the last block out of it, and symphonia (our own decoder) takes a minimum unlike
    // the maximum for a variable-block stream and finds no frame.
    if samples.len() > block {
        stream
            .stream_info_mut()
            .set_block_sizes(block, block)
            .map_err(|e| format!("FLAC block sizes: {e}"))?;
    }
    let mut sink = flacenc::bitsink::ByteSink::new();
    stream
        .write(&mut sink)
        .map_err(|e| format!("writing FLAC: {e}"))?;
    Ok(sink.into_inner())
}

#[cfg(test)]
mod tests {
    use audiocpp_engine::audio::{decode, AudioLimits};
    use audiocpp_engine::output::pcm16_le;

    #[test]
    fn a_flac_answer_decodes_to_the_wav_answers_samples() {
        let rate = 24_000;
        let tone: Vec<f32> = (0..rate * 2)
            .map(|i| 0.5 * (i as f32 * 440.0 * std::f32::consts::TAU / rate as f32).sin())
            .collect();
        let pcm = pcm16_le(&tone);
        let flac = super::encode(&pcm, rate).unwrap();
        assert_eq!(&flac[..4], b"fLaC");
        assert!(
            flac.len() < pcm.len() / 2,
            "{} of {} bytes",
            flac.len(),
            pcm.len()
        );
        let back = decode(&flac, &AudioLimits::default()).unwrap();
        assert_eq!(back.sample_rate, rate);
        // symphonia scales 16-bit samples by 1 / 32768.
        let back: Vec<u8> = back
            .samples
            .iter()
            .flat_map(|x| ((x * 32768.0).round() as i16).to_le_bytes())
            .collect();
        assert_eq!(back, pcm);
    }
}
