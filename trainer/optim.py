"""Three-tier optimizer of the pretraining stage (the DeepSeek-V4.1 report, §4.2.2 "training settings").

| parameters                                        | optimizer                                   |
|---------------------------------------------------|---------------------------------------------|
| linear-layer weight matrices                      | Muon; query and key weights head-wise Muon  |
| norms, biases, scales, other non-matrix params    | AdamW β=(0.9, 0.95), ε=1e-20, λ=0.1 (0 for  |
|                                                   | biases and scales)                          |
| token embedding, output head, Engram tables (×5)  | Sinkhorn-balanced update                    |

`build_optimizer(model, config)` routes every trainable parameter to its tier and returns a
`TieredOptimizer` that steps, zeroes, schedules and checkpoints the three together.
"""

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor, nn

__all__ = [
    "DEFAULT_CONFIG",
    "HYBRID_NS_STEPS",
    "KELLER_NS_STEPS",
    "AdamWTier",
    "Muon",
    "SinkhornOptimizer",
    "TieredOptimizer",
    "build_optimizer",
    "hybrid_newton_schulz",
    "sinkhorn_balance",
]

# Quintic Newton–Schulz coefficients (a, b, c) of X ← aX + b(XXᵀ)X + c(XXᵀ)²X.
# Keller Jordan's: slope 3.4445 at 0 inflates small singular values fast, but the iteration only
# lands them in ~[0.68, 1.13], not at 1.
KELLER_COEFFS = (3.4445, -4.7750, 2.0315)
# p(s) = 2s − 1.5s³ + 0.5s⁵ has p(1) = 1, p'(1) = 0, and maps [0.68, 1.13] into [1, 1.0006]:
# two of these polish Keller's output to singular values ~1.
POLISH_COEFFS = (2.0, -1.5, 0.5)
HYBRID_NS_STEPS = (KELLER_COEFFS,) * 8 + (POLISH_COEFFS,) * 2
KELLER_NS_STEPS = (KELLER_COEFFS,) * 5  # torch.optim.Muon's iteration, for reference runs


def hybrid_newton_schulz(G: Tensor, steps: Sequence[tuple[float, float, float]] = HYBRID_NS_STEPS) -> Tensor:
    """Orthogonalize G ≈ UVᵀ (G = USVᵀ) for a matrix or a batch of matrices (..., n, m).

    X = G / ||G||_F per matrix, so every singular value is ≤ 1; then X ← aX + b(XXᵀ)X + c(XXᵀ)²X
    for each (a, b, c) in `steps`, which applies p(σ) = aσ + bσ³ + cσ⁵ to each singular value.
    With the default 8 Keller + 2 polish steps, in exact arithmetic, σ/||G||_F ≥ 3e-4 ends in
    [1, 1.00054] and σ/||G||_F ≥ 2.33e-5 in [0.99, 1.01]; smaller ones stay below 0.99, since
    the composed polynomial has slope 3.4445⁸·2² ≈ 8e4 at 0. That is the limit on conditioning,
    not rounding: float32 and float64 give the same result.

    Matmuls run in bfloat16 on CUDA (tensor cores; each step re-projects towards the orthogonal
    set, so bf16 rounding leaves singular values within ~0.5% of 1 instead of accumulating) and
    in at least float32 elsewhere: CPUs without bf16 matrix units run bf16 matmuls slower than
    float32 and it would only cost 16 mantissa bits. The result has G's dtype; zero maps to zero.
    """
    compute_dtype = torch.bfloat16 if G.is_cuda else torch.promote_types(G.dtype, torch.float32)
    X = G.to(compute_dtype).reshape(-1, *G.shape[-2:])
    transposed = X.size(-2) > X.size(-1)
    if transposed:
        X = X.mT  # iterate on the wide side: XXᵀ is min(n, m)²
    frobenius = X.float().norm(dim=(-2, -1), keepdim=True)
    X = X / frobenius.clamp_min(torch.finfo(torch.float32).tiny).to(compute_dtype)
    for a, b, c in steps:
        gram = X @ X.mT  # XXᵀ
        polynomial = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)  # b·XXᵀ + c·(XXᵀ)²
        X = torch.baddbmm(X, polynomial, X, beta=a)  # aX + (b·XXᵀ + c·(XXᵀ)²)X
    if transposed:
        X = X.mT
    return X.reshape(G.shape).to(G.dtype)


def sinkhorn_balance(N: Tensor, iters: int = 11, tau: float = 1e-3, eps: float = 1e-20) -> Tensor:
    """Sinkhorn-balanced direction Δ of a token×feature matrix N (m rows × n cols).

    ρ_i = ||N_i,:||₂; rows with ρ_i ≤ τ·mean(ρ) are zeroed once (tokens absent from the batch);
    then `iters` alternating normalisations, odd steps rows U_i,: /= ||U_i,:||₂ + ε, even steps
    columns U_:,j /= ||U_:,j||₂ + ε; Δ = sqrt(n)·U, so after an odd `iters` each kept row has RMS 1.

    How: every step only rescales rows or columns, so U = diag(r)·N̂·diag(c) throughout (masked
    rows r_i = 0), and the norms come from S = N̂∘N̂ by matrix-vector products,
        ||U_i,:||₂ = r_i·sqrt((S c²)_i),   ||U_:,j||₂ = c_j·sqrt((r²ᵀ S)_j),
    so each step reads S once instead of reading U twice and writing it once: a third of the
    memory traffic, which bounds this update on a 129k-row embedding or head. N̂ = N/max_i ρ_i with
    ε/max_i ρ_i in place of ε is the same iteration (every entry of U stays ≤ 1, so r and c stay
    far from float32's range). A row or column whose norm falls to 2⁻⁶⁰ (≈ 9e-19) of the largest
    row's is all zero, or float32 squares cannot resolve it, and is set to zero rather than scaled
    by up to 1/ε. Computed in at least float32; the result has N's dtype.
    """
    U = N.to(torch.promote_types(N.dtype, torch.float32))
    squares = U.square()
    row_norms = squares.sum(dim=1).sqrt()
    scale = row_norms.max().clamp_min(torch.finfo(U.dtype).tiny)
    squares.div_(scale.square())
    eps = eps / scale  # ε in units of N̂

    def rescaled(v: Tensor, norms: Tensor) -> Tensor:  # v / (norms + ε), zero for empty lines
        return torch.where(norms > 2.0**-60, v / (norms + eps), 0.0)

    r = (row_norms > tau * row_norms.mean()).to(U.dtype)  # mask once, before normalizing
    c = torch.ones(U.size(1), dtype=U.dtype, device=U.device)
    for step in range(1, iters + 1):
        if step % 2 == 1:  # odd: each row's norm, sqrt(S c²)
            r = rescaled(r, r * (squares @ c.square()).sqrt())
        else:  # even: each column's norm, sqrt(r²ᵀ S)
            c = rescaled(c, c * (r.square() @ squares).sqrt())
    return (U * (r / scale).unsqueeze(1) * (c * math.sqrt(N.size(1)))).to(N.dtype)


class Muon(torch.optim.Optimizer):
    """Muon with Nesterov momentum and decoupled weight decay, optionally head-wise (Jordan et al.
    2024; head-wise for W_Q and W_K, μ = 0.95, λ = 0.1, update RMS 0.18 as in the DeepSeek-V4.1 report
    §4.2.2).

    Per parameter W ∈ R^{(H·d_h)×d_in} of a group with `heads` = H (H = 1: the whole matrix):
        M ← μM + G                               # momentum buffer, the only state
        N = μM + G                               # Nesterov
        X_h = NS(N_h) for each block N_h = N[h·d_h:(h+1)·d_h]   # own Frobenius normalisation
        O = concat_h X_h · γ·sqrt(max(d_h, d_in))  # update RMS ≈ γ, so AdamW's lr carries over
        W ← W(1 − lr·λ) − lr·O
    NS is `hybrid_newton_schulz` with the group's `ns_steps`. All blocks of one shape (up to
    transposition) across all parameters go through one batched NS call.

    With γ = 0.2 and ns_steps = KELLER_NS_STEPS this is torch.optim.Muon(nesterov=True,
    adjust_lr_fn="match_rms_adamw"): torch keeps B = (1−μ)M and orthogonalizes (1−μ)N, which the
    Frobenius normalisation makes identical.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 2.6e-4,
        momentum: float = 0.95,
        weight_decay: float = 0.1,
        gamma: float = 0.18,
        ns_steps: Sequence[tuple[float, float, float]] = HYBRID_NS_STEPS,
        heads: int = 1,
    ) -> None:
        defaults = dict(
            lr=lr, momentum=momentum, weight_decay=weight_decay, gamma=gamma, ns_steps=ns_steps, heads=heads
        )
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        group["ns_steps"] = tuple(tuple(abc) for abc in group["ns_steps"])  # hashable: a batching key
        for p in group["params"]:
            if p.ndim != 2 or p.size(0) % group["heads"]:
                raise ValueError(
                    f"Muon needs 2-D weights with rows divisible by heads={group['heads']}, got {tuple(p.shape)}"
                )

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        # (ns_steps, block rows, block cols, device, dtype) → [(param, group, its blocks, transposed)]
        batches = defaultdict(list)
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            for p in params:
                if not self.state[p]:
                    self.state[p]["momentum_buffer"] = torch.zeros_like(p)
            grads = [p.grad for p in params]
            buffers = [self.state[p]["momentum_buffer"] for p in params]
            # One multi-tensor kernel per operation for the whole group (few launches on CUDA).
            torch._foreach_mul_(buffers, group["momentum"])
            torch._foreach_add_(buffers, grads)  # M ← μM + G
            nesterovs = torch._foreach_add(grads, buffers, alpha=group["momentum"])  # N = μM + G
            for p, nesterov in zip(params, nesterovs):
                blocks = nesterov.view(group["heads"], -1, p.size(1))  # H blocks of d_h × d_in
                transposed = blocks.size(1) > blocks.size(2)
                if transposed:
                    blocks = blocks.mT  # tall blocks join the batch of their wide transposes
                key = (group["ns_steps"], *blocks.shape[1:], p.device, p.dtype)
                batches[key].append((p, group, blocks, transposed))

        params, updates, decays, scales = [], [], [], []
        for (ns_steps, *_), members in batches.items():
            all_blocks = [blocks for _, _, blocks, _ in members]
            orthogonalized = hybrid_newton_schulz(torch.cat(all_blocks), ns_steps).split([len(b) for b in all_blocks])
            for (p, group, blocks, transposed), X in zip(members, orthogonalized):
                params.append(p)
                updates.append((X.mT if transposed else X).reshape(p.shape))
                decays.append(1 - group["lr"] * group["weight_decay"])  # W ← W(1 − lr·λ)
                scales.append(-group["lr"] * group["gamma"] * math.sqrt(max(blocks.shape[1:])))  # γ·sqrt(max(d_h, d_in))
        if params:
            torch._foreach_mul_(params, decays)
            torch._foreach_mul_(updates, scales)
            torch._foreach_add_(params, updates)  # − lr·O
        return loss


class AdamWTier(torch.optim.AdamW):
    """torch.optim.AdamW with the DeepSeek-V4.1 report's settings (§4.2.2): β = (0.9, 0.95), ε = 1e-20,
    λ = 0.1.

    ε = 1e-20 keeps the update m̂/(sqrt(v̂) + ε) scale-free even for tiny gradients.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 2.6e-4,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-20,
        weight_decay: float = 0.1,
    ) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)


class SinkhornOptimizer(torch.optim.Optimizer):
    """Sinkhorn-balanced update for token×feature tables (embedding, output head, Engram).

    Per parameter W (m tokens × n features):
        M ← βM + (1−β)G ;  N = βM + (1−β)G
        Δ = sinkhorn_balance(N, iters, tau, eps)
        W ← W − γ·lr·lr_mult·Δ                   # γ = 0.18, no weight decay
    `lr_mult` is per group: 1 for embedding and head, 5 for Engram tables.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 2.6e-4,
        beta: float = 0.95,
        gamma: float = 0.18,
        lr_mult: float = 1.0,
        iters: int = 11,
        tau: float = 1e-3,
        eps: float = 1e-20,
    ) -> None:
        defaults = dict(lr=lr, beta=beta, gamma=gamma, lr_mult=lr_mult, iters=iters, tau=tau, eps=eps)
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)
        for p in self.param_groups[-1]["params"]:
            if p.ndim != 2:
                raise ValueError(f"SinkhornOptimizer needs 2-D token×feature tables, got {tuple(p.shape)}")

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            for p in params:
                if not self.state[p]:
                    self.state[p]["momentum_buffer"] = torch.zeros_like(p)
            grads = [p.grad for p in params]
            buffers = [self.state[p]["momentum_buffer"] for p in params]
            if params:
                torch._foreach_lerp_(buffers, grads, 1 - group["beta"])  # M ← βM + (1−β)G
            for p, grad, buffer in zip(params, grads, buffers):
                nesterov = grad.lerp(buffer, group["beta"])  # N = βM + (1−β)G
                direction = sinkhorn_balance(nesterov, group["iters"], group["tau"], group["eps"])
                p.add_(direction, alpha=-group["gamma"] * group["lr"] * group["lr_mult"])
        return loss


class TieredOptimizer:
    """The tiers of `build_optimizer` stepped, zeroed, scheduled and checkpointed as one.

    `optimizers` maps tier name ("muon", "adamw", "sinkhorn") to its torch Optimizer (only tiers
    that received parameters); `routing` maps parameter name to its route (see build_optimizer).
    """

    def __init__(self, optimizers: dict[str, torch.optim.Optimizer], routing: dict[str, str]) -> None:
        self.optimizers = optimizers
        self.routing = routing

    @property
    def param_groups(self) -> list[dict]:
        return [group for optimizer in self.optimizers.values() for group in optimizer.param_groups]

    def set_lr(self, lr: float) -> None:
        """Set the base lr of every tier (Sinkhorn groups still apply their lr_mult on top)."""
        for group in self.param_groups:
            group["lr"] = lr

    def step(self) -> None:
        for optimizer in self.optimizers.values():
            optimizer.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for optimizer in self.optimizers.values():
            optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, dict]:
        return {tier: optimizer.state_dict() for tier, optimizer in self.optimizers.items()}

    def load_state_dict(self, state_dict: dict[str, dict]) -> None:
        if state_dict.keys() != self.optimizers.keys():
            raise ValueError(f"checkpoint has tiers {sorted(state_dict)}, this optimizer {sorted(self.optimizers)}")
        for tier, optimizer in self.optimizers.items():
            optimizer.load_state_dict(state_dict[tier])

    def routing_report(self) -> str:
        """One line per route with its parameter count, then one line per parameter."""
        counts = defaultdict(int)
        for route in self.routing.values():
            counts[route] += 1
        width = max(map(len, self.routing), default=0)
        summary = [f"{route}: {count} params" for route, count in counts.items()]
        return "\n".join(summary + [f"{name:<{width}}  {route}" for name, route in self.routing.items()])


DEFAULT_CONFIG = {
    "lr": 2.6e-4,
    "weight_decay": 0.1,  # Muon and AdamW (decayed group)
    "muon_gamma": 0.18,
    "ns_steps": HYBRID_NS_STEPS,
    "engram_lr_mult": 5.0,
    "n_heads": None,  # else the nearest enclosing module's `n_heads`
    "n_kv_heads": None,  # else the nearest enclosing module's `n_kv_heads`, else n_heads
    # Routing patterns, each matched with re.search against the full parameter name.
    "engram_patterns": (r"engram",),
    "sinkhorn_patterns": (r"embed", r"\bwte\b", r"\blm_head\b", r"\boutput\b"),
    "query_patterns": (r"\b(q_proj|wq)\.weight$",),
    "key_patterns": (r"\b(k_proj|wk)\.weight$",),
    "no_decay_patterns": (r"bias", r"scale", r"gain"),
}


def build_optimizer(model: nn.Module, config: dict | None = None) -> TieredOptimizer:
    """Route every trainable parameter of `model` to its tier; return them as a TieredOptimizer.

    Routing rule, first match wins (patterns are `config` keys, matched by re.search on the name
    from model.named_parameters(); frozen parameters are skipped, tied ones routed once):
      1. 2-D and matches engram_patterns (default "engram")           → "sinkhorn_engram"
         (Sinkhorn, lr_mult = engram_lr_mult, default 5)
      2. 2-D and matches sinkhorn_patterns (default: "embed" — covers embed_tokens and
         tok_embeddings —, "wte", "lm_head", "output" as a dotted name segment) → "sinkhorn"
      3. 2-D and matches query_patterns (q_proj.weight, wq.weight)     → "muon_headwise",
         heads = config n_heads, else `n_heads` of the nearest enclosing module
      4. 2-D and matches key_patterns (k_proj.weight, wk.weight)       → "muon_headwise",
         heads = n_kv_heads (config, else nearest module attribute), else n_heads as in 3
         (grouped-query attention: W_K has n_kv_heads blocks)
      5. any other 2-D weight (v/o projections, MLP, projectors, fused QKV) → "muon"
      6. everything else (1-D norms, biases, scalars, >2-D tensors):
         matches no_decay_patterns ("bias", "scale", "gain")           → "adamw_no_decay" (λ = 0)
         otherwise, norm weights included                              → "adamw" (λ = weight_decay)
    Only biases and scales are exempt from weight decay (norm weights are not among them), so norm
    weights keep λ = 0.1; add r"norm" to no_decay_patterns to exempt them.

    `config` keys (unknown keys raise): lr, weight_decay, muon_gamma, ns_steps, engram_lr_mult,
    n_heads, n_kv_heads and the *_patterns above; defaults in DEFAULT_CONFIG.
    """
    config = {**DEFAULT_CONFIG, **(config or {})}
    unknown = config.keys() - DEFAULT_CONFIG.keys()
    if unknown:
        raise ValueError(f"unknown optimizer config keys: {sorted(unknown)}")

    def matches(name: str, patterns_key: str) -> bool:
        return any(re.search(pattern, name) for pattern in config[patterns_key])

    def heads_for(name: str, attribute: str) -> int | None:
        if config[attribute] is not None:
            return config[attribute]
        module_path = name.split(".")[:-1]
        for depth in range(len(module_path), -1, -1):  # nearest enclosing module first
            heads = getattr(model.get_submodule(".".join(module_path[:depth])), attribute, None)
            if heads is not None:
                return heads
        return None

    routing: dict[str, str] = {}
    groups: dict[tuple, list[Tensor]] = defaultdict(list)  # (tier, group options) → params
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.ndim == 2 and matches(name, "engram_patterns"):
            route, tier, options = "sinkhorn_engram", "sinkhorn", {"lr_mult": config["engram_lr_mult"]}
        elif p.ndim == 2 and matches(name, "sinkhorn_patterns"):
            route, tier, options = "sinkhorn", "sinkhorn", {}
        elif p.ndim == 2 and (matches(name, "query_patterns") or matches(name, "key_patterns")):
            heads = heads_for(name, "n_heads")
            if matches(name, "key_patterns"):
                heads = heads_for(name, "n_kv_heads") or heads
            if heads is None:
                raise ValueError(f"{name}: head-wise Muon needs config['n_heads'] or an n_heads attribute")
            route, tier, options = "muon_headwise", "muon", {"heads": heads}
        elif p.ndim == 2:
            route, tier, options = "muon", "muon", {}
        elif matches(name, "no_decay_patterns"):
            route, tier, options = "adamw_no_decay", "adamw", {"weight_decay": 0.0}
        else:
            route, tier, options = "adamw", "adamw", {}
        routing[name] = route
        groups[(tier, tuple(options.items()))].append(p)

    param_groups: dict[str, list[dict]] = defaultdict(list)
    for (tier, options), params in groups.items():
        param_groups[tier].append({"params": params, **dict(options)})
    lr, weight_decay = config["lr"], config["weight_decay"]
    optimizers: dict[str, torch.optim.Optimizer] = {}
    if "muon" in param_groups:
        optimizers["muon"] = Muon(
            param_groups["muon"],
            lr=lr,
            weight_decay=weight_decay,
            gamma=config["muon_gamma"],
            ns_steps=config["ns_steps"],
        )
    if "adamw" in param_groups:
        optimizers["adamw"] = AdamWTier(param_groups["adamw"], lr=lr, weight_decay=weight_decay)
    if "sinkhorn" in param_groups:
        optimizers["sinkhorn"] = SinkhornOptimizer(param_groups["sinkhorn"], lr=lr)
    return TieredOptimizer(optimizers, routing)
