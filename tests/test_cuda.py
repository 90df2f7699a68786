"""The CUDA path of the pretraining stage: bf16 Newton–Schulz, Muon against torch.optim.Muon, the
tiered step against the CPU float32 step, and sample-level masking under bf16 autocast.

Skipped where torch sees no CUDA device (CI has none); run on a GPU with
`python -m pytest tests/test_cuda.py -rA -s` (each test prints what it measured).
"""

import copy

import pytest
import torch
from torch import nn

from tests.test_lm_detect import tiny_lm  # noqa: F401 (fixture)
from tests.test_optim import ill_conditioned, polar_factor, run_steps, spec_sinkhorn
from trainer.model import ModelConfig, Transformer
from trainer.optim import KELLER_NS_STEPS, Muon, build_optimizer, hybrid_newton_schulz, sinkhorn_balance

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
CUDA = torch.device("cuda")


@pytest.mark.parametrize(
    "shape,condition",
    [((256, 1024), None), ((1024, 256), None), ((8, 128, 512), None), ((1024, 4096), None), ((64, 128), 1e3)],
)
def test_bf16_newton_schulz_lands_singular_values_in_0_99_1_01(shape, condition):
    generator = torch.Generator().manual_seed(0)
    G = torch.randn(shape, generator=generator) if condition is None else ill_conditioned(*shape, condition, generator)
    X = hybrid_newton_schulz(G.float().to(CUDA))
    assert X.dtype == torch.float32 and X.is_cuda
    singular_values = torch.linalg.svdvals(X.double().cpu())
    error = (X.double().cpu() - polar_factor(G)).abs().max().item()
    print(f"{shape} condition {condition}: σ in [{singular_values.min():.5f}, {singular_values.max():.5f}], "
          f"max |X − UVᵀ| {error:.2e}")
    assert singular_values.min() >= 0.99 and singular_values.max() <= 1.01


def test_cuda_muon_matches_torch_muon_within_bf16_noise():
    # Both run Newton–Schulz in bf16 on CUDA; each is compared with our float64 CPU run.
    generator = torch.Generator().manual_seed(6)
    shapes = [(256, 512), (512, 256), (384, 384)]
    initial = [torch.randn(shape, generator=generator) for shape in shapes]
    grads = [[torch.randn(shape, generator=generator) for shape in shapes] for _ in range(4)]

    def ours(ps):
        return Muon(ps, lr=0.02, weight_decay=0.1, momentum=0.95, gamma=0.2, ns_steps=KELLER_NS_STEPS)

    def reference(ps):
        return torch.optim.Muon(ps, lr=0.02, weight_decay=0.1, momentum=0.95, nesterov=True,
                                adjust_lr_fn="match_rms_adamw")

    on_cuda = [[G.to(CUDA) for G in step] for step in grads]
    ours_cuda = run_steps(ours, [W.to(CUDA) for W in initial], on_cuda)
    torch_cuda = run_steps(reference, [W.to(CUDA) for W in initial], on_cuda)
    exact = run_steps(ours, initial, grads, dtype=torch.float64)
    for step_ours, step_torch, step_exact in zip(ours_cuda, torch_cuda, exact):
        for O_ours, O_torch, O_exact in zip(step_ours, step_torch, step_exact):
            ours_error = (O_ours.double().cpu() - O_exact).abs().max().item()
            torch_error = (O_torch.double().cpu() - O_exact).abs().max().item()
            difference = (O_ours - O_torch).abs().max().item()
            print(f"{tuple(O_exact.shape)}: ours−f64 {ours_error:.2e}, torch−f64 {torch_error:.2e}, "
                  f"ours−torch {difference:.2e}")
            assert ours_error <= 1.5 * torch_error + 1e-3
            assert difference <= 2 * torch_error + 1e-3


def test_cuda_sinkhorn_balance_equals_the_literal_spec_iteration():
    generator = torch.Generator().manual_seed(9)
    N = torch.randn(4096, 256, generator=generator) * torch.rand(4096, 1, generator=generator).pow(4) * 1e-4
    N[::7] *= 1e-5  # masked rows
    delta = sinkhorn_balance(N.to(CUDA))
    error = (delta.double().cpu() - spec_sinkhorn(N)).abs().max().item()
    print(f"sinkhorn 4096x256 on CUDA: max |Δ − spec float64| {error:.2e}")
    assert error < 1e-4


def test_cuda_tiered_step_matches_cpu_float32_step():
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=512, d_model=128, n_layers=2, n_heads=4, d_ff=384)
    cpu_model = Transformer(config)
    cuda_model = copy.deepcopy(cpu_model).to(CUDA)
    generator = torch.Generator().manual_seed(1)
    for p_cpu, p_cuda in zip(cpu_model.parameters(), cuda_model.parameters()):
        p_cpu.grad = torch.randn(p_cpu.shape, generator=generator)
        p_cuda.grad = p_cpu.grad.to(CUDA)
    before = {name: p.detach().clone() for name, p in cpu_model.named_parameters()}
    cpu_opt, cuda_opt = build_optimizer(cpu_model, {"lr": 0.01}), build_optimizer(cuda_model, {"lr": 0.01})
    cpu_opt.step()
    cuda_opt.step()
    worst = 0.0
    for (name, p_cpu), p_cuda in zip(cpu_model.named_parameters(), cuda_model.parameters()):
        update_cpu, update_cuda = p_cpu.detach() - before[name], p_cuda.detach().cpu() - before[name]
        relative = ((update_cuda - update_cpu).norm() / update_cpu.norm()).item()
        worst = max(worst, relative)
        assert relative < 2e-2, (name, cpu_opt.routing[name], relative)
    print(f"worst relative update difference CUDA (bf16 Newton–Schulz) vs CPU float32: {worst:.2e}")


def test_cuda_bf16_logits_of_one_document_ignore_the_others():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=1000, d_model=128, n_layers=2, n_heads=4)).to(CUDA)
    ids = torch.randint(1000, (1, 96), device=CUDA)
    segments = torch.tensor([0] * 40 + [1] * 30 + [2] * 26, device=CUDA).unsqueeze(0)
    changed = ids.clone()
    changed[0, 40:70] = torch.randint(1000, (30,), device=CUDA)
    for attention in ("dense", "segments"):
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            a, b = model(ids, segments, attention=attention), model(changed, segments, attention=attention)
        others = (segments[0] != 1)
        moved = (a[0, ~others] - b[0, ~others]).abs().max().item()
        leaked = (a[0, others] - b[0, others]).abs().max().item()
        print(f"{attention}: changed document's logits moved {moved:.3f}, the others' {leaked:.2e}")
        assert moved > 0.01 and leaked <= 1e-2 * moved


def test_cuda_training_steps_lower_the_loss():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=256, d_model=128, n_layers=2, n_heads=4)).to(CUDA)
    optimizer = build_optimizer(model, {"lr": 3e-3})
    ids = torch.randint(256, (4, 256), device=CUDA)
    losses = []
    for _ in range(30):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(ids)
        loss = nn.functional.cross_entropy(logits.float()[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    assert losses[-1] < losses[0] - 1.0


def test_lm_discrepancy_on_cuda_bf16_matches_cpu(tiny_lm):
    from filters.lm_detect import SamplingDiscrepancy

    texts = ["Rain again this morning, so the market moved indoors.", "The committee met on Tuesday to vote."]
    cpu = SamplingDiscrepancy(tiny_lm).load().score(texts)
    cuda = SamplingDiscrepancy(tiny_lm, device="cuda").load().score(texts)
    print(f"discrepancy cpu {cpu}, cuda bf16 {cuda}")
    for a, b in zip(cpu, cuda):
        assert abs(a - b) <= 0.05 * abs(a) + 0.1
