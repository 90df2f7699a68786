"""Tests of trainer/optim.py against the DeepSeek-V4.1 report's update rules (§4.2.2) and torch's own
optimizers (CPU, seconds)."""

import copy
import io
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from trainer.optim import (
    KELLER_NS_STEPS,
    AdamWTier,
    Muon,
    SinkhornOptimizer,
    build_optimizer,
    hybrid_newton_schulz,
    sinkhorn_balance,
)


def polar_factor(G: torch.Tensor) -> torch.Tensor:
    """UVᵀ of G = USVᵀ, in float64."""
    U, _, Vh = torch.linalg.svd(G.double(), full_matrices=False)
    return U @ Vh


def ill_conditioned(n: int, m: int, condition: float, generator: torch.Generator) -> torch.Tensor:
    """U diag(logspace(0, −log10 condition)) Vᵀ with random orthonormal U, V (float64)."""
    r = min(n, m)
    U, _ = torch.linalg.qr(torch.randn(n, r, dtype=torch.float64, generator=generator))
    V, _ = torch.linalg.qr(torch.randn(m, r, dtype=torch.float64, generator=generator))
    return (U * torch.logspace(0, -math.log10(condition), r, dtype=torch.float64)) @ V.T


# --- hybrid Newton–Schulz ---------------------------------------------------------------------
# Measured on CPU (float32): singular values in [1.000000, 1.000538], max |X − UVᵀ| ≈ 1e-4 for every
# case below; float64 gives the same figures, so the residue is the polish polynomial's, not rounding.


@pytest.mark.parametrize("shape", [(64, 128), (128, 64), (4, 64, 128)])
def test_newton_schulz_lands_gaussian_singular_values_at_one(shape):
    G = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    X = hybrid_newton_schulz(G)
    singular_values = torch.linalg.svdvals(X.double())
    assert X.shape == G.shape and X.dtype == G.dtype
    assert singular_values.min() >= 0.99 and singular_values.max() <= 1.01
    assert (X.double() - polar_factor(G)).abs().max() < 2e-4


def test_newton_schulz_condition_1e3_matches_polar_factor():
    G = ill_conditioned(64, 128, 1e3, torch.Generator().manual_seed(1)).float()
    X = hybrid_newton_schulz(G)
    singular_values = torch.linalg.svdvals(X.double())
    assert singular_values.min() >= 0.99 and singular_values.max() <= 1.01
    assert (X.double() - polar_factor(G)).abs().max() < 2e-4


def test_newton_schulz_cannot_lift_singular_values_below_its_reach():
    # 8 Keller + 2 polish steps multiply a tiny σ/||G||_F by at most ≈ 3.4445⁸·2² ≈ 8e4, so the scalar
    # iteration lands σ/||G||_F ≥ 2.33e-5 in [0.99, 1.01] and leaves smaller ones short of 0.99.
    # Condition 1e5 over 64 singular values puts the smallest 8 below that threshold.
    G = ill_conditioned(64, 128, 1e5, torch.Generator().manual_seed(2))
    relative = torch.linalg.svdvals(G) / G.norm()  # descending, as svdvals of X below
    singular_values = torch.linalg.svdvals(hybrid_newton_schulz(G.float()).double())
    reachable = relative >= 2.4e-5
    assert ((singular_values[reachable] >= 0.99) & (singular_values[reachable] <= 1.01)).all()
    assert (singular_values[relative < 2.3e-5] < 0.99).all()
    assert (relative < 2.3e-5).sum() == 8


def test_newton_schulz_of_zero_is_zero():
    assert torch.equal(hybrid_newton_schulz(torch.zeros(8, 16)), torch.zeros(8, 16))


# --- Sinkhorn ---------------------------------------------------------------------------------


def test_sinkhorn_balance_spec_check_value():
    delta = sinkhorn_balance(torch.tensor([[1.0, 2.0], [3.0, 4.0], [0.0, 0.0]]))
    expected = torch.tensor([[0.894427, 1.095445], [1.095445, 0.894427], [0.0, 0.0]])
    torch.testing.assert_close(delta, expected, atol=1e-5, rtol=0)


def test_sinkhorn_balance_masks_quiet_rows_and_gives_unit_row_rms():
    N = torch.randn(16, 8, generator=torch.Generator().manual_seed(3))
    N[5] *= 1e-4  # ρ_5 ≈ 3e-4 ≤ τ·mean(ρ) ≈ 3e-3: masked
    N_before = N.clone()
    delta = sinkhorn_balance(N)
    assert torch.equal(N, N_before)
    row_rms = delta.pow(2).mean(dim=1).sqrt()
    assert torch.equal(delta[5], torch.zeros(8))
    torch.testing.assert_close(row_rms[torch.arange(16) != 5], torch.ones(15))


def spec_sinkhorn(N: torch.Tensor, iters: int = 11, tau: float = 1e-3, eps: float = 1e-20) -> torch.Tensor:
    """The Sinkhorn-balanced update's iteration written out literally, in float64: rows with
    ρ_i <= τ·mean(ρ) zeroed once, then K alternating row / column normalisations, times sqrt(n)."""
    U = N.double().clone()
    rho = U.norm(dim=1)
    U[rho <= tau * rho.mean()] = 0
    for step in range(1, iters + 1):
        dim = 1 if step % 2 == 1 else 0
        U = U / (U.norm(dim=dim, keepdim=True) + eps)
    return math.sqrt(N.size(1)) * U


@pytest.mark.parametrize("magnitude", [1e-15, 1e-6, 1.0, 1e12])
def test_sinkhorn_balance_equals_the_literal_spec_iteration(magnitude):
    generator = torch.Generator().manual_seed(9)
    N = torch.randn(300, 48, generator=generator) * torch.rand(300, 1, generator=generator).pow(4)  # spread rows
    N[::7] *= 1e-5  # below τ·mean: masked
    N[:, 5] = 0  # a feature with no gradient: its column stays zero
    N = N * magnitude
    delta, expected = sinkhorn_balance(N), spec_sinkhorn(N)
    assert delta.dtype == torch.float32 and torch.isfinite(delta).all()
    torch.testing.assert_close(delta.double(), expected, atol=2e-5, rtol=2e-5)


def test_sinkhorn_optimizer_step_is_the_spec_formula():
    generator = torch.Generator().manual_seed(4)
    W0 = torch.randn(12, 6, generator=generator)
    grads = [torch.randn(12, 6, generator=generator) for _ in range(3)]
    lr, beta = 0.01, 0.95
    W = nn.Parameter(W0.clone())
    optimizer = SinkhornOptimizer([W], lr=lr)
    expected, M = W0.clone(), torch.zeros_like(W0)
    for G in grads:
        M = beta * M + (1 - beta) * G
        N = beta * M + (1 - beta) * G
        expected = expected - 0.18 * lr * sinkhorn_balance(N)
        W.grad = G.clone()
        optimizer.step()
        torch.testing.assert_close(W.detach(), expected, atol=1e-7, rtol=0)


def test_sinkhorn_optimizer_lr_mult_scales_update_and_has_no_weight_decay():
    generator = torch.Generator().manual_seed(5)
    W0, G = torch.randn(12, 6, generator=generator), torch.randn(12, 6, generator=generator)
    plain, engram = nn.Parameter(W0.clone()), nn.Parameter(W0.clone())
    optimizer = SinkhornOptimizer([{"params": [plain]}, {"params": [engram], "lr_mult": 5.0}], lr=0.01)
    plain.grad, engram.grad = G.clone(), G.clone()
    optimizer.step()
    torch.testing.assert_close(engram.detach() - W0, 5 * (plain.detach() - W0))
    # Zero gradient: every row is masked, Δ = 0, and with no weight decay W does not move.
    before = plain.detach().clone()
    optimizer.state.clear()
    plain.grad = torch.zeros_like(G)
    engram.grad = None
    optimizer.step()
    assert torch.equal(plain.detach(), before)


# --- Muon -------------------------------------------------------------------------------------


def run_steps(optimizer_factory, initial, grads, dtype=torch.float32, lr=0.02, weight_decay=0.1):
    """Step the optimizer over `grads`; return per step the updates O = (W(1 − lr·λ) − W_new)/lr."""
    params = [nn.Parameter(W.to(dtype, copy=True)) for W in initial]
    optimizer = optimizer_factory(params)
    updates = []
    for step_grads in grads:
        before = [p.detach().clone() for p in params]
        for p, G in zip(params, step_grads):
            p.grad = G.to(dtype)
        optimizer.step()
        updates.append([(W * (1 - lr * weight_decay) - p.detach()) / lr for W, p in zip(before, params)])
    return updates


def test_muon_matches_torch_muon_with_gamma_0_2_and_keller_steps():
    # torch.optim.Muon keeps B = (1−μ)M and orthogonalizes (1−μ)N — equal after the Frobenius
    # normalisation — but runs Newton–Schulz in bfloat16 even on CPU, where ours uses float32.
    # So: ours must sit on the float64 result (1e-4), and differ from torch by no more than torch's
    # own bf16 error against float64 (measured 1.65e-2 here, 1.9e-2 with other seeds, on updates of
    # RMS ≈ 0.17 over 4 steps; ours − torch exceeds torch − float64 by at most 2e-6).
    generator = torch.Generator().manual_seed(6)
    shapes = [(32, 64), (64, 32), (48, 48)]
    initial = [torch.randn(shape, generator=generator) for shape in shapes]
    grads = [[torch.randn(shape, generator=generator) for shape in shapes] for _ in range(4)]
    reference = run_steps(
        lambda ps: torch.optim.Muon(
            ps, lr=0.02, weight_decay=0.1, momentum=0.95, nesterov=True, adjust_lr_fn="match_rms_adamw"
        ),
        initial,
        grads,
    )

    def ours(ps):
        return Muon(ps, lr=0.02, weight_decay=0.1, momentum=0.95, gamma=0.2, ns_steps=KELLER_NS_STEPS)

    float32, float64 = run_steps(ours, initial, grads), run_steps(ours, initial, grads, dtype=torch.float64)
    for step_torch, step_32, step_64 in zip(reference, float32, float64):
        for O_torch, O_32, O_64 in zip(step_torch, step_32, step_64):
            torch_bf16_error = (O_torch.double() - O_64).abs().max()
            assert (O_32.double() - O_64).abs().max() < 1e-4
            assert (O_32 - O_torch).abs().max() <= torch_bf16_error + 1e-4
            assert torch_bf16_error < 0.03


def test_muon_batches_same_shape_and_transposed_matrices_without_changing_results():
    generator = torch.Generator().manual_seed(7)
    shapes = [(16, 40), (16, 40), (40, 16), (24, 24)]
    initial = [torch.randn(shape, generator=generator) for shape in shapes]
    grads = [[torch.randn(shape, generator=generator) for shape in shapes] for _ in range(3)]
    together = run_steps(lambda ps: Muon(ps, lr=0.02), initial, grads)
    for i in range(len(shapes)):
        alone = run_steps(lambda ps: Muon(ps, lr=0.02), [initial[i]], [[step[i]] for step in grads])
        for step_together, step_alone in zip(together, alone):
            torch.testing.assert_close(step_together[i], step_alone[0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("head_shape", [(8, 24), (16, 8)])
def test_headwise_muon_equals_muon_on_each_head_alone(head_shape):
    heads, (d_head, d_in) = 4, head_shape
    generator = torch.Generator().manual_seed(8)
    initial = torch.randn(heads * d_head, d_in, generator=generator)
    grads = [torch.randn(heads * d_head, d_in, generator=generator) for _ in range(3)]
    headwise = run_steps(lambda ps: Muon(ps, lr=0.02, heads=heads), [initial], [[G] for G in grads])
    per_head = run_steps(
        lambda ps: Muon(ps, lr=0.02), list(initial.chunk(heads)), [list(G.chunk(heads)) for G in grads]
    )
    for step_headwise, step_per_head in zip(headwise, per_head):
        torch.testing.assert_close(step_headwise[0], torch.cat(step_per_head), atol=1e-6, rtol=0)
    # each head's block is scaled by its own shape: update RMS ≈ 0.18
    rms = torch.cat(per_head[0]).pow(2).mean().sqrt()
    assert 0.17 < rms < 0.19


def test_muon_rejects_rows_not_divisible_by_heads():
    with pytest.raises(ValueError, match="heads=3"):
        Muon([nn.Parameter(torch.zeros(8, 4))], heads=3)


# --- AdamW tier -------------------------------------------------------------------------------


def test_adamw_tier_equals_torch_adamw():
    generator = torch.Generator().manual_seed(9)
    shapes = [(32,), (7,), ()]
    initial = [torch.randn(shape, generator=generator) for shape in shapes]
    grads = [[torch.randn(shape, generator=generator) for shape in shapes] for _ in range(3)]
    ours = run_steps(lambda ps: AdamWTier(ps, lr=0.02), initial, grads)
    reference = run_steps(
        lambda ps: torch.optim.AdamW(ps, lr=0.02, betas=(0.9, 0.95), eps=1e-20, weight_decay=0.1),
        initial,
        grads,
    )
    for step_ours, step_reference in zip(ours, reference):
        for O_ours, O_reference in zip(step_ours, step_reference):
            assert torch.equal(O_ours, O_reference)


# --- build_optimizer --------------------------------------------------------------------------


class Attention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=True)
        self.o_proj = nn.Linear(n_heads * self.head_dim, d_model, bias=False)

    def forward(self, x):
        def split(t, heads):
            return t.unflatten(-1, (heads, self.head_dim)).transpose(1, 2)

        q = split(self.q_proj(x), self.n_heads)
        k = split(self.k_proj(x), self.n_kv_heads)
        v = split(self.v_proj(x), self.n_kv_heads)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).flatten(2))


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int):
        super().__init__()
        self.attn_norm, self.mlp_norm = nn.RMSNorm(d_model), nn.RMSNorm(d_model)
        self.attn = Attention(d_model, n_heads, n_kv_heads)
        self.mlp = nn.ModuleDict(
            {
                "gate_proj": nn.Linear(d_model, 2 * d_model, bias=False),
                "up_proj": nn.Linear(d_model, 2 * d_model, bias=False),
                "down_proj": nn.Linear(2 * d_model, d_model),
            }
        )

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        h = self.mlp_norm(x)
        return x + self.mlp["down_proj"](F.silu(self.mlp["gate_proj"](h)) * self.mlp["up_proj"](h))


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 64, d_model: int = 32, n_heads: int = 4, n_kv_heads: int = 2):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d_model)
        self.engram = nn.Embedding(vocab, d_model)
        self.layers = nn.ModuleList([Block(d_model, n_heads, n_kv_heads)])
        self.norm = nn.RMSNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        self.logit_scale = nn.Parameter(torch.ones(()))

    def forward(self, tokens):
        x = self.embed_tokens(tokens) + self.engram(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x)) * self.logit_scale


TINY_ROUTING = {
    "embed_tokens.weight": "sinkhorn",
    "engram.weight": "sinkhorn_engram",
    "layers.0.attn_norm.weight": "adamw",
    "layers.0.mlp_norm.weight": "adamw",
    "layers.0.attn.q_proj.weight": "muon_headwise",
    "layers.0.attn.k_proj.weight": "muon_headwise",
    "layers.0.attn.v_proj.weight": "muon",
    "layers.0.attn.v_proj.bias": "adamw_no_decay",
    "layers.0.attn.o_proj.weight": "muon",
    "layers.0.mlp.gate_proj.weight": "muon",
    "layers.0.mlp.up_proj.weight": "muon",
    "layers.0.mlp.down_proj.weight": "muon",
    "layers.0.mlp.down_proj.bias": "adamw_no_decay",
    "norm.weight": "adamw",
    "lm_head.weight": "sinkhorn",
    "logit_scale": "adamw_no_decay",
}


def test_build_optimizer_routes_every_parameter_by_the_documented_rule():
    model = TinyLM()
    optimizer = build_optimizer(model)
    assert optimizer.routing == TINY_ROUTING
    attn = model.layers[0].attn
    groups = {id(p): group for group in optimizer.param_groups for p in group["params"]}
    assert groups[id(attn.q_proj.weight)]["heads"] == 4  # n_heads of the enclosing Attention
    assert groups[id(attn.k_proj.weight)]["heads"] == 2  # n_kv_heads (grouped-query attention)
    assert groups[id(attn.v_proj.weight)]["heads"] == 1
    assert groups[id(model.norm.weight)]["weight_decay"] == 0.1
    assert groups[id(model.logit_scale)]["weight_decay"] == 0.0
    assert groups[id(attn.v_proj.bias)]["weight_decay"] == 0.0
    assert groups[id(model.engram.weight)]["lr_mult"] == 5.0
    assert groups[id(model.lm_head.weight)]["lr_mult"] == 1.0
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(model.parameters()))
    report = optimizer.routing_report()
    assert "muon_headwise: 2 params" in report and "layers.0.attn.k_proj.weight" in report


def test_build_optimizer_llama_names_and_config():
    model = nn.Module()
    model.tok_embeddings, model.output = nn.Embedding(50, 16), nn.Linear(16, 50, bias=False)
    model.attention = nn.Module()
    for name in ("wq", "wk", "wv", "wo"):
        setattr(model.attention, name, nn.Linear(16, 16, bias=False))
    model.attention.wo.weight.requires_grad_(False)
    optimizer = build_optimizer(model, {"n_heads": 8})
    assert optimizer.routing == {
        "tok_embeddings.weight": "sinkhorn",
        "output.weight": "sinkhorn",
        "attention.wq.weight": "muon_headwise",
        "attention.wk.weight": "muon_headwise",
        "attention.wv.weight": "muon",
    }
    assert {g["heads"] for g in optimizer.optimizers["muon"].param_groups} == {8, 1}
    with pytest.raises(ValueError, match="n_heads"):
        build_optimizer(model)
    with pytest.raises(ValueError, match="unknown optimizer config keys"):
        build_optimizer(model, {"n_heads": 8, "weight_decy": 0.0})


def test_tiered_optimizer_trains_every_parameter_and_sets_lr():
    torch.manual_seed(0)
    model = TinyLM()
    optimizer = build_optimizer(model)
    optimizer.set_lr(1e-2)
    assert {g["lr"] for g in optimizer.param_groups} == {1e-2}
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    tokens = torch.randint(0, 64, (2, 16))
    F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten()).backward()
    optimizer.step()
    optimizer.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    for name, p in model.named_parameters():
        assert not torch.equal(p.detach(), before[name]), name


def test_state_dict_round_trip_restores_identical_steps():
    def random_steps(model, optimizer, seed, steps=2):
        generator = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            for p in model.parameters():
                p.grad = torch.randn(p.shape, generator=generator)
            optimizer.step()

    torch.manual_seed(0)
    model = TinyLM()
    optimizer = build_optimizer(model, {"lr": 1e-2})
    random_steps(model, optimizer, seed=1)
    checkpoint = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, checkpoint)
    random_steps(model, optimizer, seed=2)

    torch.manual_seed(1)
    resumed_model = TinyLM()
    resumed = build_optimizer(resumed_model)  # default lr: the checkpoint's 1e-2 must come back
    checkpoint.seek(0)
    saved = torch.load(checkpoint)
    resumed_model.load_state_dict(saved["model"])
    resumed.load_state_dict(copy.deepcopy(saved["optimizer"]))
    assert {g["lr"] for g in resumed.param_groups} == {1e-2}
    random_steps(resumed_model, resumed, seed=2)
    for (name, p), q in zip(model.named_parameters(), resumed_model.parameters()):
        assert torch.equal(p, q), name
