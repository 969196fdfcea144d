"""How eager and aot_eager sum the two gradients of a tied weight, on the CPU.

A masked-LM head shares its weight with the word embedding (DistilBert's 30522×768). Eager's
autograd engine accumulates the weight's two gradient contributions in place (`aten::add_`);
aot_eager's traced backward graph adds them out of place (`aten::add`) into a new tensor of the
weight's size, allocated afresh each step. This times the harness-like step (bf16 autocast, loss,
backward) both ways and prints each one's add ops on that shape, their self CPU time and the
step's minor page faults (docs/benchmarks/dashboard.md, "One process per row, and aot_eager's
slower huggingface steps").

    python benchmarks/tied_weight_grad.py [--vocab 30522 --hidden 768 --tokens 512 --steps 10]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch
from torch import nn


class TiedHead(nn.Module):
    """An embedding and an output projection sharing one weight, as a masked-LM's."""

    def __init__(self, vocab: int, hidden: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, hidden)
        self.head = nn.Linear(hidden, vocab)
        self.head.weight = self.embedding.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embedding(ids))


def step(model: nn.Module, ids: torch.Tensor) -> None:
    for parameter in model.parameters():
        parameter.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(ids)
    logits.float().logsumexp(-1).mean().backward()


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=30522)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(0)
    ids = torch.randint(0, args.vocab, (1, args.tokens))
    shape = [args.vocab, args.hidden]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, weight {shape}")
    for backend in ("eager", "aot_eager"):
        model = TiedHead(args.vocab, args.hidden)
        run = step if backend == "eager" else torch.compile(step, backend=backend)
        for _ in range(3):
            run(model, ids)
        seconds, faults = [], []
        for _ in range(args.steps):
            before, started = minor_faults(), time.perf_counter()
            run(model, ids)
            seconds.append(time.perf_counter() - started)
            faults.append(minor_faults() - before)
        with torch.profiler.profile(record_shapes=True) as profile:
            run(model, ids)
        adds = {event.key: round(event.self_cpu_time_total / 1e3, 2)
                for event in profile.key_averages(group_by_input_shape=True)
                if event.key in ("aten::add", "aten::add_") and event.input_shapes[:1] == [shape]}
        print(f"{backend:9s} step {statistics.median(seconds) * 1e3:.1f} ms (median of {args.steps}), "
              f"minor faults {statistics.median(faults):.0f} a step, ops on the tied weight (ms): {adds}")


if __name__ == "__main__":
    main()
