"""PyTorch baseline for benches/train_step.rs: the same model and step.

One layer: token + positional embedding, factored attention (W_Q, W_K, W_V, W_O in R^{d x r},
logits h_i^T W_Q W_K^T h_j without 1/sqrt(r), causal softmax), residual, ReLU MLP with a hidden
bias, residual, unembedding; mean next-token cross-entropy over positions 0..T-2; AdamW.
f32, CPU, torch.set_num_threads(2). Prints one JSON line: steps per second.

Usage: python benches/train_step_torch.py [--d 64] [--t 64] [--batch 32] [--steps 50]
"""
import argparse
import json
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--d", type=int, default=64)
p.add_argument("--r", type=int, default=64)
p.add_argument("--t", type=int, default=64)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--vocab", type=int, default=64)
p.add_argument("--hidden", type=int, default=256)
p.add_argument("--steps", type=int, default=50)
p.add_argument("--warmup", type=int, default=5)
a = p.parse_args()

torch.set_num_threads(2)
torch.manual_seed(0)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        d, r, h, v, t = a.d, a.r, a.hidden, a.vocab, a.t
        s = d ** -0.5
        self.emb = torch.nn.Parameter(torch.randn(v, d))
        self.pos = torch.nn.Parameter(torch.randn(t, d))
        self.wq = torch.nn.Parameter(torch.randn(d, r) * s)
        self.wk = torch.nn.Parameter(torch.randn(d, r) * s)
        self.wv = torch.nn.Parameter(torch.randn(d, r) * s)
        self.wo = torch.nn.Parameter(torch.randn(d, r) * r ** -0.5)
        self.w1 = torch.nn.Parameter(torch.randn(d, h) * s)
        self.b1 = torch.nn.Parameter(torch.zeros(h))
        self.w2 = torch.nn.Parameter(torch.randn(h, d) * h ** -0.5)
        self.unemb = torch.nn.Parameter(torch.randn(d, v) * s)
        self.register_buffer("mask", torch.triu(torch.ones(t, t, dtype=torch.bool), 1))

    def forward(self, tok):
        h = self.emb[tok] + self.pos
        q, k, v = h @ self.wq, h @ self.wk, h @ self.wv
        z = (q @ k.transpose(1, 2)).masked_fill(self.mask, float("-inf"))
        o = torch.softmax(z, -1) @ v
        h = h + o @ self.wo.T
        h = h + torch.relu(h @ self.w1 + self.b1) @ self.w2
        return h @ self.unemb


m = Model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=1e-2)
tok = torch.randint(0, a.vocab, (a.batch, a.t))


def step():
    logits = m(tok)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, a.vocab), tok[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


for _ in range(a.warmup):
    step()
t0 = time.perf_counter()
for _ in range(a.steps):
    step()
dt = time.perf_counter() - t0
print(json.dumps({"impl": "pytorch", "torch": torch.__version__, "threads": torch.get_num_threads(),
                  "steps": a.steps, "seconds": dt, "steps_per_s": a.steps / dt}))
