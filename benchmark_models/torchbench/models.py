"""Built-in torchbench models, written here with torchbench's architectures.

Used when the real `torchbenchmark` package is not importable, so that
`--suite-name=torchbench` runs on a fresh machine. Hyperparameters are torchbench's;
the code is this project's own. Each builder takes (batch_size, device) and returns the
module and its positional inputs; they train with the reference runner's recipe
(benchmark_models/training.py), not torchbench's own optimizers, as PyTorch/XLA's runner does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Built:
    module: nn.Module
    args: tuple


# --------------------------------------------------------------------------- llama
@dataclass(frozen=True)
class LlamaConfig:
    """torchbench's `llama`: a small LLaMA (8 layers of width 512) over 32-token prompts."""

    dim: int = 512
    n_layers: int = 8
    n_heads: int = 8
    vocab_size: int = 32000
    multiple_of: int = 256
    norm_eps: float = 1e-5
    max_seq_len: int = 1024
    prompt_len: int = 32


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rotary_tables(head_dim: int, positions: int, theta: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin of the rotary angles, one row per position, one column per channel pair."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(positions).float(), inv_freq)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate consecutive channel pairs of x (batch, seq, heads, head_dim) by position."""
    pairs = x.float().unflatten(-1, (-1, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2).type_as(x)


class LlamaAttention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.n_heads, self.head_dim = cfg.n_heads, cfg.dim // cfg.n_heads
        self.wq = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = apply_rotary(self.wq(x).view(b, s, self.n_heads, self.head_dim), cos, sin).transpose(1, 2)
        k = apply_rotary(self.wk(x).view(b, s, self.n_heads, self.head_dim), cos, sin).transpose(1, 2)
        v = self.wv(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim) + mask
        weights = F.softmax(scores.float(), dim=-1).type_as(q)
        return self.wo((weights @ v).transpose(1, 2).reshape(b, s, -1))


class SwiGLU(nn.Module):
    def __init__(self, dim: int, multiple_of: int) -> None:
        super().__init__()
        hidden = int(2 * 4 * dim / 3)
        hidden = multiple_of * ((hidden + multiple_of - 1) // multiple_of)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class LlamaBlock(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = LlamaAttention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = SwiGLU(cfg.dim, cfg.multiple_of)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    """Decoder-only LLaMA; returns float logits of the last position, as torchbench's does."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(LlamaBlock(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        cos, sin = rotary_tables(cfg.dim // cfg.n_heads, cfg.max_seq_len * 2)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        h = self.tok_embeddings(tokens)
        cos, sin = self.rope_cos[:seq], self.rope_sin[:seq]
        mask = torch.full((seq, seq), float("-inf"), device=tokens.device).triu(1)
        for layer in self.layers:
            h = layer(h, cos, sin, mask)
        return self.output(self.norm(h)[:, -1, :]).float()


def build_llama(batch_size: int, device: str) -> Built:
    cfg = LlamaConfig()
    tokens = torch.randint(0, cfg.vocab_size, (batch_size, cfg.prompt_len), device=device)
    return Built(Llama(cfg).to(device), (tokens,))


# --------------------------------------------------------------------------- nanogpt
@dataclass(frozen=True)
class GPTConfig:
    """torchbench's `nanogpt`: GPT-2 small (124M) on 64-token prompts."""

    block_size: int = 1024
    vocab_size: int = 50304  # GPT-2's 50257 padded to a multiple of 64
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    prompt_len: int = 64


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
                   for z in self.c_attn(x).split(c, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, c))


class GPTBlock(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(), nn.Linear(4 * cfg.n_embd, cfg.n_embd)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT-2 with tied input/output embeddings; returns the last position's logits."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.h = nn.ModuleList(GPTBlock(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                # GPT-2's init: residual projections scaled down by depth.
                std = 0.02 / math.sqrt(2 * cfg.n_layer) if name.endswith(("c_proj.weight", "mlp.2.weight")) else 0.02
                nn.init.normal_(p, mean=0.0, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x)[:, -1:, :])


def build_nanogpt(batch_size: int, device: str) -> Built:
    cfg = GPTConfig()
    idx = torch.randint(1, cfg.vocab_size, (batch_size, cfg.prompt_len), device=device)
    return Built(GPT(cfg).to(device), (idx,))


# --------------------------------------------------------------------------- BERT_pytorch
@dataclass(frozen=True)
class BertConfig:
    """torchbench's `BERT_pytorch`: BERT-base over a 20k-word random corpus, 128 tokens."""

    vocab_size: int = 20005  # 20000 corpus words and 5 special tokens
    hidden: int = 768
    n_layers: int = 12
    attn_heads: int = 12
    seq_len: int = 128
    dropout: float = 0.1


class UnbiasedLayerNorm(nn.Module):
    """BERT_pytorch's layer norm: divides by the unbiased std plus eps, not sqrt(var + eps)."""

    def __init__(self, features: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + self.eps) + self.bias


class BertAttention(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.heads, self.d_k = cfg.attn_heads, cfg.hidden // cfg.attn_heads
        self.qkv = nn.ModuleList(nn.Linear(cfg.hidden, cfg.hidden) for _ in range(3))
        self.out = nn.Linear(cfg.hidden, cfg.hidden)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        q, k, v = (lin(x).view(b, -1, self.heads, self.d_k).transpose(1, 2) for lin in self.qkv)
        scores = (q @ k.transpose(-2, -1) / math.sqrt(self.d_k)).masked_fill(~mask, torch.finfo(q.dtype).min)
        y = self.dropout(F.softmax(scores, dim=-1)) @ v
        return self.out(y.transpose(1, 2).reshape(b, -1, self.heads * self.d_k))


class BertBlock(nn.Module):
    """Pre-norm encoder block, as BERT_pytorch writes it."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.norm1, self.norm2 = UnbiasedLayerNorm(cfg.hidden), UnbiasedLayerNorm(cfg.hidden)
        self.attention = BertAttention(cfg)
        self.feed_forward = nn.Sequential(
            nn.Linear(cfg.hidden, 4 * cfg.hidden), nn.GELU(), nn.Dropout(cfg.dropout),
            nn.Linear(4 * cfg.hidden, cfg.hidden),
        )
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.dropout(self.attention(self.norm1(x), mask))
        x = x + self.dropout(self.feed_forward(self.norm2(x)))
        return self.dropout(x)


def sinusoid_table(max_len: int, d_model: int) -> torch.Tensor:
    position = torch.arange(max_len).float().unsqueeze(1)
    div = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
    table = torch.zeros(max_len, d_model)
    table[:, 0::2], table[:, 1::2] = torch.sin(position * div), torch.cos(position * div)
    return table


class BertLM(nn.Module):
    """BERT with next-sentence and masked-LM heads; returns both log-probabilities."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.token = nn.Embedding(cfg.vocab_size, cfg.hidden, padding_idx=0)
        self.segment = nn.Embedding(3, cfg.hidden, padding_idx=0)
        self.register_buffer("position", sinusoid_table(512, cfg.hidden), persistent=False)
        self.embed_dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(BertBlock(cfg) for _ in range(cfg.n_layers))
        self.next_sentence = nn.Linear(cfg.hidden, 2)
        self.mask_lm = nn.Linear(cfg.hidden, cfg.vocab_size)

    def forward(self, tokens: torch.Tensor, segments: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mask = (tokens > 0)[:, None, None, :]
        x = self.embed_dropout(self.token(tokens) + self.position[: tokens.shape[1]] + self.segment(segments))
        for block in self.blocks:
            x = block(x, mask)
        return F.log_softmax(self.next_sentence(x[:, 0]), dim=-1), F.log_softmax(self.mask_lm(x), dim=-1)


def build_bert(batch_size: int, device: str) -> Built:
    """Sentence pairs of random words, padded with 0 after a random length, as the corpus yields."""
    cfg = BertConfig()
    tokens = torch.randint(5, cfg.vocab_size, (batch_size, cfg.seq_len))
    lengths = torch.randint(cfg.seq_len // 8, cfg.seq_len + 1, (batch_size, 1))
    positions = torch.arange(cfg.seq_len)[None, :]
    tokens = tokens.masked_fill(positions >= lengths, 0)
    segments = torch.where(positions < lengths // 2, 1, 2).masked_fill(positions >= lengths, 0)

    return Built(BertLM(cfg).to(device), (tokens.to(device), segments.to(device)))


# --------------------------------------------------------------------------- dlrm
@dataclass(frozen=True)
class DLRMConfig:
    """torchbench's `dlrm`: the DLRM paper's configuration, random data."""

    num_tables: int = 8
    rows_per_table: int = 1_000_000
    sparse_dim: int = 64
    bottom_mlp: tuple[int, ...] = (512, 512, 64)
    top_mlp: tuple[int, ...] = (1024, 1024, 1024, 1)
    lookups_per_sample: int = 100


def mlp(sizes: tuple[int, ...], sigmoid_last: bool = False) -> nn.Sequential:
    """Linear layers each followed by ReLU; DLRM's top MLP ends in a sigmoid instead (a click
    probability), without which a dead final ReLU makes the output, and every gradient, zero."""
    layers: list[nn.Module] = []
    for index, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        linear = nn.Linear(fan_in, fan_out)
        nn.init.normal_(linear.weight, 0.0, math.sqrt(2.0 / (fan_in + fan_out)))
        nn.init.normal_(linear.bias, 0.0, math.sqrt(1.0 / fan_out))
        last = index == len(sizes) - 2
        layers += [linear, nn.Sigmoid() if sigmoid_last and last else nn.ReLU()]
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    """Bottom MLP on dense features, summed embedding bags on sparse ones, pairwise dot
    interactions, top MLP."""

    def __init__(self, cfg: DLRMConfig) -> None:
        super().__init__()
        self.bottom = mlp(cfg.bottom_mlp)
        self.embeddings = nn.ModuleList(
            nn.EmbeddingBag(cfg.rows_per_table, cfg.sparse_dim, mode="sum", sparse=True)
            for _ in range(cfg.num_tables)
        )
        bound = math.sqrt(1.0 / cfg.rows_per_table)
        for bag in self.embeddings:
            nn.init.uniform_(bag.weight, -bound, bound)
        features = cfg.num_tables + 1
        interactions = features * (features - 1) // 2 + cfg.bottom_mlp[-1]
        self.top = mlp((interactions, *cfg.top_mlp), sigmoid_last=True)
        rows, cols = torch.tril_indices(features, features, offset=-1)
        self.register_buffer("pair_rows", rows, persistent=False)
        self.register_buffer("pair_cols", cols, persistent=False)

    def forward(self, dense: torch.Tensor, offsets: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        pooled = [bag(indices[i], offsets[i]) for i, bag in enumerate(self.embeddings)]
        features = torch.stack([x, *pooled], dim=1)
        dots = features @ features.transpose(1, 2)
        return self.top(torch.cat([x, dots[:, self.pair_rows, self.pair_cols]], dim=1))


def build_dlrm(batch_size: int, device: str) -> Built:
    cfg = DLRMConfig()
    dense = torch.rand(batch_size, cfg.bottom_mlp[0], device=device)
    lookups = cfg.lookups_per_sample
    offsets = (torch.arange(batch_size, device=device) * lookups).expand(cfg.num_tables, -1).contiguous()
    indices = torch.randint(0, cfg.rows_per_table, (cfg.num_tables, batch_size * lookups), device=device)

    return Built(DLRM(cfg).to(device), (dense, offsets, indices))


# --------------------------------------------------------------------------- resnet50
class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_ch: int, width: int, stride: int) -> None:
        super().__init__()
        out_ch = width * self.expansion
        self.conv1 = nn.Conv2d(in_ch, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)  # stride here: v1.5
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_ch, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.downsample = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet50(nn.Module):
    """ResNet-50 v1.5, the torchvision architecture torchbench's `resnet50` measures."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        stages, in_ch = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(blocks):
                stages.append(Bottleneck(in_ch, width, stride if i == 0 else 1))
                in_ch = width * Bottleneck.expansion
        self.blocks = nn.Sequential(*stages)
        self.fc = nn.Linear(in_ch, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, stride=2, padding=1)
        x = self.blocks(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def build_resnet50(batch_size: int, device: str) -> Built:
    images = torch.randn(batch_size, 3, 224, 224, device=device)
    return Built(ResNet50().to(device), (images,))


def build_torchvision(constructor: str, batch_size: int, device: str) -> Built:
    """torchbench's TorchVisionModel: `torchvision.models.<constructor>` on a (batch, 3, 224, 224)
    input, with random weights (weights=None) where torchbench downloads ImageNet ones."""
    from benchmark_models.optional import require

    models = require("torchvision").models
    module = getattr(models, constructor)(weights=None).to(device)
    return Built(module, (torch.randn(batch_size, 3, 224, 224, device=device),))


BUILDERS: dict[str, Callable[[int, str], Built]] = {
    "BERT_pytorch": build_bert,
    "dlrm": build_dlrm,
    "llama": build_llama,
    "nanogpt": build_nanogpt,
    "resnet50": build_resnet50,
}
