"""Benchmark: what one sentence's decoder step costs, and how much of it is the matrix
products, for each way mtkit can multiply a few rows by a layer's weights.

A step of beam search over one sentence multiplies `--beam` rows by every linear layer of
the decoder, in order, and then by the output projection. This times:

- `step_us`: `decode_step` itself at position --position, fp32 and `--quantize int8`,
  compiled as engines run it (TorchScript: model/step.py) and as plain Python;
- `linears_us`: the same linear layers called in the same order with the same rows and
  nothing else between them, through each kernel: fp32 (decode_step's transposed
  weights), int8 through fbgemm (what int8 uses for few rows), int8 dequantised to fp32,
  and int8 through oneDNN (what int8 uses for many rows).

The step's weights do not all fit in the cache, so a layer is read from memory at every
step in both: this is the floor the matrix products put under a step, and what is left of
`step_us` above it is everything else (attention, norms, the operators in between).

    python bench/step_kernels.py --model runs/cpu-30m/model.pt [--thread-counts 1 2]
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import decoding_parser, record  # noqa: E402

from mtkit.decode import int8  # noqa: E402
from mtkit.decode.engine import TorchEngine  # noqa: E402
from mtkit.model.step import StepLinear  # noqa: E402


def step_linears(model: torch.nn.Module) -> list[torch.nn.Linear]:
    """The decoder's linear layers in the order a step calls them, then the output
    projection."""
    order = []
    for layer in model.decoder:
        order += [layer.self_attn.qkv, layer.self_attn.out, layer.cross_attn.q,
                  layer.cross_attn.out, layer.ffn.w_in, layer.ffn.w_out]
    return [*order, model.out_proj]


def linears_us(linears: list[torch.nn.Linear], rows: int, repeat: int) -> dict[str, float]:
    """Microseconds to call every layer once, in order, with `rows` rows, by kernel."""
    inputs = [torch.randn(rows, lin.in_features) for lin in linears]
    kernels = {"fp32": [StepLinear.of(lin) for lin in linears],
               "int8_fp32": [int8.Int8Linear(lin, 10**12, "fp32") for lin in linears]}
    # no fp32 copy (fp32_work 0): every layer's few rows through fbgemm, where torch has it
    fbgemm = [int8.Int8Linear(lin, 0, "auto") for lin in linears]
    if all(layer.fbgemm is not None for layer in fbgemm):
        kernels["int8_fbgemm"] = [layer.few_rows for layer in fbgemm]
    kernels["int8_onednn"] = [layer.many_rows for layer in fbgemm]
    out = {}
    for name, calls in kernels.items():
        def one_step(calls=calls) -> None:
            for call, x in zip(calls, inputs, strict=True):
                call(x)
        one_step()
        out[name] = round(timeit.timeit(one_step, number=repeat) / repeat * 1e6, 1)
    return out


def step_us(engine: TorchEngine, rows: int, position: int, repeat: int, compiled: bool
            ) -> float:
    """Microseconds of one decode_step of `rows` rows at `position`, source of 40 tokens,
    compiled or as plain Python."""
    model = engine.searched[0]
    kept = model.weights.compiled
    model.weights.compiled = kept if compiled else None
    src = torch.randint(10, 1000, (1, 40))
    memory, mask = model.encode(src)
    cache = model.init_cache(memory, mask, position + 2, rows)
    tokens = torch.full((rows,), 10)
    for _ in range(position):
        model.decode_step(tokens, cache)

    def one_step() -> None:
        cache.step = position
        model.decode_step(tokens, cache)
    one_step()
    took = timeit.timeit(one_step, number=repeat) / repeat
    model.weights.compiled = kept
    return round(took * 1e6, 1)


def main() -> None:
    parser = decoding_parser(__doc__)
    parser.add_argument("--thread-counts", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--position", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args()
    results = {}
    with torch.inference_mode():
        for threads in args.thread_counts:
            torch.set_num_threads(threads)
            engines = {q: TorchEngine.load([args.model], torch.device("cpu"), q)
                       for q in ("none", "int8")}
            results[str(threads)] = {
                "step_us": {("fp32" if q == "none" else q) + suffix:
                            step_us(e, args.beam, args.position, args.repeat, compiled)
                            for q, e in engines.items()
                            for suffix, compiled in (("", True), ("_plain", False))},
                "linears_us": linears_us(step_linears(engines["none"].models[0]), args.beam,
                                         args.repeat),
            }
    record("step_kernels", {"rows": args.beam, "position": args.position,
                            "by_threads": results, "model": str(args.model)},
           "bench/step_kernels.py")


if __name__ == "__main__":
    main()
