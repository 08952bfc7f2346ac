"""Kokoro-82M numerical reference for the Rust tests: the int8 ONNX (the file the converter
reads) rewritten into the exact f32 graph it was quantized from, run by onnxruntime.

The int8 graph quantizes activations at run time (DynamicQuantizeLinear before every
MatMulInteger / ConvInteger, and inside DynamicQuantizeLSTM), so its output is not what an
f32 engine computes. Every quantized weight here is dequantized, W = (q - zero_point) *
scale (per output channel where the scale is a vector), and each quantized op is replaced
by its f32 op (MatMul, Conv, LSTM, Gather); that graph is the reference.

The rewritten graph also exposes the intermediates the engine's blocks are checked on (see
`INTERMEDIATES`) and, in a second variant, takes the integer durations as an input
(`pred_dur`), so the decoder can be checked with durations forced equal to ours.

Usage:
  tts_reference.py dump --model kokoro.onnx --voices DIR --vocab vocab.json --out DIR \
      [--case NAME=PHONEMES ...] [--save-f32 f32.onnx]
      writes DIR/<case>.npz, the same arrays raw in DIR/<case>/<name>.f32|.i64, and
      DIR/<case>.json (phonemes, voice row, frames, each array's shape and file, and the
      ONNX value it came from).
  tts_reference.py run --model kokoro.onnx --voices DIR --vocab vocab.json \
      --phonemes P --voice NAME [--speed S] [--durations a,b,...] --out FILE.npz
      runs one input (durations forced when given), for the engine's tests.
"""
import argparse
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

# array name -> the value of the (int8) Kokoro ONNX export it is read from.
INTERMEDIATES = {
    "bert_dur": "/encoder/bert/encoder/albert_layer_groups.0/albert_layers.0/full_layer_layer_norm_11/LayerNormalization_output_0",
    "d_en": "/encoder/bert_encoder/Add_output_0",
    "d": "/encoder/predictor/text_encoder/Concat_4_output_0",
    "duration": "/encoder/Div_output_0",
    "pred_dur": "/encoder/Cast_output_0",
    "t_en": "/encoder/text_encoder/Transpose_2_output_0",
    "en": "/encoder/MatMul_output_0",
    "asr": "/encoder/MatMul_1_output_0",
    "F0_pred": "/encoder/Squeeze_output_0",
    "N_pred": "/encoder/Squeeze_1_output_0",
    "har_source": "/decoder/decoder/generator/m_source/l_tanh/Tanh_output_0",
    "har_spec": "/decoder/decoder/generator/Sqrt_output_0",
    "har_phase": "/decoder/decoder/generator/Where_1_output_0",
    "gen_mag": "/decoder/decoder/generator/Exp_output_0",
    "gen_phase": "/decoder/decoder/generator/Sin_output_0",
}
# The integer durations the frame expansion starts from (int64, [1, tokens]).
DURATION_VALUE = INTERMEDIATES["pred_dur"]

# Phoneme strings (misaki's US lexicon entries, words joined by spaces) of the cases the
# tests use: the round-trip sentence and a longer one with punctuation.
DEFAULT_CASES = {
    "speech_recognition": "spˈiʧ ɹˌɛkəɡnˈɪʃən ɪn ɹˈʌst ɪz wˈɜɹkɪŋ tədˈA.",
    "quick_brown_fox": "ðə kwˈɪk bɹˈWn fˈɑks ʤˈʌmps ˈOvəɹ ðə lˈAzi dˈɔɡ, ænd ðˈɛn ɪt ɹˈʌnz bˈæk hˈOm.",
}


class Graph:
    """Index of a graph's nodes by the values they produce and consume."""

    def __init__(self, graph):
        self.graph = graph
        self.init = {i.name: i for i in graph.initializer}
        self.producer = {}
        self.consumers = {}
        for node in graph.node:
            for out in node.output:
                self.producer[out] = node
            for inp in node.input:
                self.consumers.setdefault(inp, []).append(node)

    def array(self, name):
        return numpy_helper.to_array(self.init[name])

    def only_consumer(self, value, op_type):
        nodes = self.consumers.get(value, [])
        if len(nodes) != 1 or nodes[0].op_type != op_type:
            raise ValueError(f"{value}: expected one {op_type} consumer, found {[n.op_type for n in nodes]}")
        return nodes[0]

    def weight_scale(self, scales_value):
        """The weight's scale initializer inside `Mul(activation_scale, weight_scale)`."""
        mul = self.producer[scales_value]
        found = [i for i in mul.input if i in self.init]
        if mul.op_type != "Mul" or len(found) != 1:
            raise ValueError(f"{scales_value}: not Mul(activation scale, weight scale)")
        return self.array(found[0])

    def dequantize_input(self, quantized_value):
        """The f32 value a DynamicQuantizeLinear output was quantized from."""
        dql = self.producer[quantized_value]
        if dql.op_type != "DynamicQuantizeLinear":
            raise ValueError(f"{quantized_value}: not produced by DynamicQuantizeLinear")
        return dql.input[0]

    def float_bias(self, value):
        """The f32 bias initializer behind an int32 bias `Reshape(Cast(Floor(Div(b, s))))`."""
        node = self.producer.get(value)
        while node is not None:
            for inp in node.input:
                if inp in self.init and self.init[inp].data_type == onnx.TensorProto.FLOAT and inp.endswith(".bias"):
                    return inp
            node = self.producer.get(node.input[0])
        raise ValueError(f"{value}: no f32 bias found")


def dequantized(q, zero_point, scale, channel_axis):
    """(q - zero_point) * scale in f32, a vector scale applying along `channel_axis`."""
    q = q.astype(np.float32)
    zero_point = zero_point.astype(np.float32)
    scale = scale.astype(np.float32)
    if scale.ndim == 1 and scale.size > 1:
        shape = [1] * q.ndim
        shape[channel_axis] = scale.size
        zero_point = zero_point.reshape(shape) if zero_point.size > 1 else zero_point
        scale = scale.reshape(shape)
    return ((q - zero_point) * scale).astype(np.float32)


def to_f32(model):
    """The int8 Kokoro ONNX rewritten to the f32 graph it was quantized from."""
    g = Graph(model.graph)
    replace = {}  # id(node to drop) -> replacement node or None
    new_inits = {}

    def add_init(name, arr):
        new_inits[name] = numpy_helper.from_array(arr, name)
        return name

    for node in model.graph.node:
        if node.op_type == "MatMulInteger":
            x = g.dequantize_input(node.input[0])
            cast = g.only_consumer(node.output[0], "Cast")
            mul = g.only_consumer(cast.output[0], "Mul")
            scale = g.weight_scale(mul.input[1])
            w = dequantized(g.array(node.input[1]), g.array(node.input[3]), scale, 1)
            wname = add_init(node.input[1].removesuffix("_quantized") + "_f32", w)
            replace[id(mul)] = helper.make_node("MatMul", [x, wname], list(mul.output), name=node.name + "_f32")
        elif node.op_type == "ConvInteger":
            x = g.dequantize_input(node.input[0])
            nxt = g.consumers[node.output[0]][0]
            bias = []
            if nxt.op_type == "Add":
                other = [i for i in nxt.input if i != node.output[0]][0]
                bias = [g.float_bias(other)]
                nxt = g.only_consumer(nxt.output[0], "Cast")
            mul = g.only_consumer(nxt.output[0], "Mul")
            scale = g.weight_scale(mul.input[1])
            w = dequantized(g.array(node.input[1]), g.array(node.input[3]), scale, 0)
            wname = add_init(node.input[1].removesuffix("_quantized") + "_f32", w)
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            replace[id(mul)] = helper.make_node("Conv", [x, wname] + bias, list(mul.output), name=node.name + "_f32", **attrs)
        elif node.op_type == "DynamicQuantizeLSTM":
            ins = list(node.input) + [""] * (12 - len(node.input))
            # DynamicQuantizeLSTM keeps W as [dirs, input, 4*hidden] and R as
            # [dirs, hidden, 4*hidden]; ONNX LSTM wants [dirs, 4*hidden, input|hidden].
            w = dequantized(g.array(ins[1]), g.array(ins[9]), g.array(ins[8]), 0).transpose(0, 2, 1)
            r = dequantized(g.array(ins[2]), g.array(ins[11]), g.array(ins[10]), 0).transpose(0, 2, 1)
            wname = add_init(ins[1].removesuffix("_quantized") + "_f32", np.ascontiguousarray(w))
            rname = add_init(ins[2].removesuffix("_quantized") + "_f32", np.ascontiguousarray(r))
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            lstm_ins = [ins[0], wname, rname, ins[3], ins[4], ins[5], ins[6]]
            while lstm_ins and lstm_ins[-1] == "":
                lstm_ins.pop()
            replace[id(node)] = helper.make_node("LSTM", lstm_ins, list(node.output), name=node.name + "_f32", **attrs)
        elif node.op_type == "DequantizeLinear":
            gather = g.producer[node.input[0]]
            if gather.op_type != "Gather" or gather.input[0] not in g.init:
                raise ValueError(f"{node.name}: DequantizeLinear of something other than a weight Gather")
            w = dequantized(g.array(gather.input[0]), g.array(node.input[2]), g.array(node.input[1]), 0)
            wname = add_init(gather.input[0].removesuffix("_quantized") + "_f32", w)
            attrs = {a.name: helper.get_attribute_value(a) for a in gather.attribute}
            replace[id(node)] = helper.make_node("Gather", [wname, gather.input[1]], list(node.output), name=gather.name + "_f32", **attrs)

    nodes = []
    for node in model.graph.node:
        nodes.append(replace.get(id(node), node))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    model.graph.initializer.extend(new_inits.values())
    prune(model)
    left = {n.op_type for n in model.graph.node} & {"MatMulInteger", "ConvInteger", "DynamicQuantizeLSTM", "DynamicQuantizeLinear", "DequantizeLinear"}
    if left:
        raise ValueError(f"quantized ops left after the rewrite: {sorted(left)}")
    return model


def prune(model):
    """Drops the nodes and initializers no graph output depends on (in place)."""
    g = Graph(model.graph)
    needed = {o.name for o in model.graph.output}
    keep = set()
    stack = list(needed)
    while stack:
        value = stack.pop()
        node = g.producer.get(value)
        if node is None or id(node) in keep:
            continue
        keep.add(id(node))
        stack.extend(i for i in node.input if i)
    nodes = [n for n in model.graph.node if id(n) in keep]
    used = {i for n in nodes for i in n.input}
    inits = [i for i in model.graph.initializer if i.name in used]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    del model.graph.initializer[:]
    model.graph.initializer.extend(inits)
    del model.graph.value_info[:]


def with_intermediates(model):
    """Adds every value of `INTERMEDIATES` as a graph output (in place)."""
    for name, value in INTERMEDIATES.items():
        elem = onnx.TensorProto.INT64 if name == "pred_dur" else onnx.TensorProto.FLOAT
        model.graph.output.append(helper.make_tensor_value_info(value, elem, None))
    return model


def with_forced_durations(model):
    """The graph taking the integer durations as input `pred_dur` (int64 [1, tokens])
    instead of computing them; the duration predictor's outputs are dropped."""
    model.graph.input.append(helper.make_tensor_value_info("pred_dur", onnx.TensorProto.INT64, [1, "sequence_length"]))
    nodes = [n for n in model.graph.node if DURATION_VALUE not in n.output]
    nodes.append(helper.make_node("Identity", ["pred_dur"], [DURATION_VALUE], name="forced_durations"))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    keep = [o for o in model.graph.output if o.name not in (INTERMEDIATES["duration"], DURATION_VALUE)]
    del model.graph.output[:]
    model.graph.output.extend(keep)
    prune(model)
    return model


def session(model):
    opts = ort.SessionOptions()
    # No graph rewrites: the reference is the graph as written (ORT's fusions change
    # rounding, and the harmonic source's phase amplifies any change).
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def load_vocab(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return data["vocab"] if "vocab" in data else data


def token_ids(phonemes, vocab):
    missing = sorted({c for c in phonemes if c not in vocab})
    if missing:
        raise ValueError(f"phonemes not in the vocabulary: {missing}")
    ids = [vocab[c] for c in phonemes]
    if not 0 < len(ids) <= 510:
        raise ValueError(f"{len(ids)} tokens: Kokoro takes 1 to 510")
    return ids


def voice_row(voices_dir, voice, n_tokens):
    """The style vector of `voice` for `n_tokens` phoneme tokens (row n_tokens - 1)."""
    pack = np.fromfile(os.path.join(voices_dir, f"{voice}.bin"), dtype="<f4")
    if pack.size != 510 * 256:
        raise ValueError(f"{voice}.bin: {pack.size} floats, expected 510 x 256")
    return pack.reshape(510, 256)[n_tokens - 1].copy()


def feeds(ids, style, speed):
    return {
        "tokens": np.array([[0] + ids + [0]], dtype=np.int64),
        "style": style.reshape(1, 256).astype(np.float32),
        "speed": np.array([speed], dtype=np.float32),
    }


def run(sess, feed):
    names = [o.name for o in sess.get_outputs()]
    values = sess.run(names, feed)
    by_value = dict(zip(names, values))
    out = {"audio": by_value["audio"]}
    for name, value in INTERMEDIATES.items():
        if value in by_value:
            out[name] = by_value[value]
    return out


def save(out_npz, arrays):
    """Writes `arrays` as an .npz (for numpy users) and, for the Rust tests, each array as
    raw little-endian bytes in a folder beside it (`<case>/<name>.f32` or `.i64`); returns
    {name: {"shape", "dtype", "file"}}."""
    np.savez(out_npz, **arrays)
    folder = out_npz[: -len(".npz")] if out_npz.endswith(".npz") else out_npz + ".raw"
    os.makedirs(folder, exist_ok=True)
    index = {}
    for name, value in arrays.items():
        value = np.asarray(value)
        if value.dtype.kind == "f":
            value, ext = value.astype("<f4"), "f32"
        else:
            value, ext = value.astype("<i8"), "i64"
        path = os.path.join(folder, f"{name}.{ext}")
        value.tofile(path)
        index[name] = {"shape": list(value.shape), "dtype": ext, "file": os.path.relpath(path, os.path.dirname(out_npz) or ".")}
    return index


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["dump", "run"])
    ap.add_argument("--model", required=True)
    ap.add_argument("--voices", required=True)
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--voice", default="af_heart")
    ap.add_argument("--speed", type=float, default=1.0)
    ap.add_argument("--case", action="append", default=[], help="NAME=PHONEMES")
    ap.add_argument("--phonemes")
    ap.add_argument("--durations", help="comma-separated integer durations, one per token incl. the two 0s")
    ap.add_argument("--save-f32")
    a = ap.parse_args()

    vocab = load_vocab(a.vocab)
    f32 = to_f32(onnx.load(a.model))
    if a.save_f32:
        onnx.save(f32, a.save_f32)
    free = session(with_intermediates(onnx.ModelProto.FromString(f32.SerializeToString())))
    forced = session(with_forced_durations(with_intermediates(onnx.ModelProto.FromString(f32.SerializeToString()))))

    if a.mode == "run":
        ids = token_ids(a.phonemes, vocab)
        feed = feeds(ids, voice_row(a.voices, a.voice, len(ids)), a.speed)
        if a.durations:
            durations = [int(d) for d in a.durations.split(",")]
            if len(durations) != len(ids) + 2:
                sys.exit(f"--durations: {len(durations)} values for {len(ids) + 2} tokens")
            feed["pred_dur"] = np.array([durations], dtype=np.int64)
            out = run(forced, feed)
        else:
            out = run(free, feed)
        index = save(a.out, dict(input_ids=feed["tokens"], style=feed["style"][0], **out))
        with open(a.out[: -len(".npz")] + ".json" if a.out.endswith(".npz") else a.out + ".json", "w", encoding="utf-8") as f:
            json.dump({"arrays": index}, f, indent=1)
        return

    cases = dict(DEFAULT_CASES)
    for spec in a.case:
        name, _, phonemes = spec.partition("=")
        cases[name] = phonemes
    os.makedirs(a.out, exist_ok=True)
    for name, phonemes in cases.items():
        ids = token_ids(phonemes, vocab)
        style = voice_row(a.voices, a.voice, len(ids))
        feed = feeds(ids, style, a.speed)
        out = run(free, feed)
        frames = int(out["pred_dur"].sum())
        if out["audio"].size != frames * 600:
            raise ValueError(f"{name}: {out['audio'].size} samples for {frames} frames")
        # The forced-durations graph fed the durations just computed must agree with the
        # free graph: it checks the rewiring itself.
        feed_forced = dict(feed, pred_dur=out["pred_dur"])
        check = run(forced, feed_forced)
        if not np.array_equal(check["audio"], out["audio"]):
            raise ValueError(f"{name}: forced-durations graph differs from the free graph")
        index = save(os.path.join(a.out, f"{name}.npz"), dict(input_ids=feed["tokens"], style=style, **out))
        sidecar = {
            "arrays": index,
            "phonemes": phonemes,
            "voice": a.voice,
            "voice_row": len(ids) - 1,
            "speed": a.speed,
            "frames": frames,
            "onnx_values": dict(INTERMEDIATES, audio="audio", input_ids="tokens", style="style"),
            "graph": "int8 Kokoro ONNX dequantized to f32, onnxruntime %s, graph optimizations off, 1 thread" % ort.__version__,
        }
        with open(os.path.join(a.out, f"{name}.json"), "w", encoding="utf-8") as f:
            json.dump(sidecar, f, indent=1, ensure_ascii=False)
        print(name, "tokens", len(ids), "frames", frames, "samples", out["audio"].size)


if __name__ == "__main__":
    main()
