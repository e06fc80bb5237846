"""Typed configs loaded from flat YAML; unknown keys are errors that name the key and the file.

Every verb (generate, bench, library, curate, mine, ...) has a pydantic config class; ``load_config``
reads a YAML file, applies ``dotted.key=value`` overrides, and validates. The resolved config (after
overrides) is what artefacts carry, together with its hash and the git SHA.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError


class ConfigError(ValueError):
    pass


class Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------- backends
class HFBackendConfig(Cfg):
    kind: Literal["hf"] = "hf"
    model: str = "smollm2"  # "smollm2" (embedded GGUF), a local path, or a hub id
    gguf_file: str | None = None
    revision: str | None = None
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "float32"
    device: str = "cpu"  # "cpu", "cuda", "cuda:1", or "auto" (device_map)
    adapters: dict[str, str] = Field(default_factory=dict)  # role -> PEFT adapter path
    batch_size: int = Field(default=16, ge=1)
    # per_row: each prompt of a batch is prefilled alone (no padding, exactly the one-at-a-time prefill) and
    # the batch decodes together from the merged, preallocated KV cache; batched: one padded forward for the
    # whole batch. auto = per_row on the CPU (prefill is compute-bound there), batched on accelerators.
    # per_row is used only for models whose cache is plain full attention; others fall back to batched.
    prefill: Literal["auto", "per_row", "batched"] = "auto"
    # per_row prefill reuses the keys/values of prompt prefixes seen before (system prompts, a debater's
    # previous round): an LRU bounded by this many MiB (SmolLM2 bf16 needs ~23 KB per token); 0 = off.
    prefix_cache_mb: int = Field(default=1024, ge=0)
    # "matmul": decode steps and prompts that continue a cached prefix run attention as batched matmuls over
    # the KV heads (agents/backends/cpu_attention.py: eager's numerics, faster than SDPA's CPU kernel at these
    # shapes); everything else stays SDPA. "model": the model's own attention. auto = matmul on the CPU only.
    attention: Literal["auto", "matmul", "model"] = "auto"
    temperature: float = Field(default=0.0, ge=0.0)  # 0 = greedy
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int = 0
    load_in_4bit: bool = False
    load_in_8bit: bool = False
    cache_dir: str | None = None  # where the GGUF is converted once to a normal checkpoint


class OpenAIBackendConfig(Cfg):
    kind: Literal["openai"] = "openai"
    model: str
    base_url: str | None = None  # None = api.openai.com; any OpenAI-compatible server works
    api_key_env: str = "OPENAI_API_KEY"  # the NAME of the variable; the key itself never enters a config
    concurrency: int = Field(default=8, ge=1)
    max_retries: int = Field(default=6, ge=0)
    timeout_s: float = Field(default=120.0, gt=0)
    backoff_initial_s: float = Field(default=1.0, ge=0)
    backoff_max_s: float = Field(default=60.0, ge=0)
    temperature: float = Field(default=0.0, ge=0.0)
    cache_dir: str | None = ".cache/tribunal/responses"  # None disables the response cache
    json_mode: bool = False  # ask for response_format=json_object where a role wants JSON
    extra_body: dict[str, Any] = Field(default_factory=dict)


class BatchBackendConfig(Cfg):
    kind: Literal["batch"] = "batch"
    model: str
    batch_dir: str  # where input files are exported and output files are imported
    endpoint: str = "/v1/chat/completions"
    temperature: float = Field(default=0.0, ge=0.0)
    json_mode: bool = False
    price_factor: float = Field(default=0.5, gt=0)  # Batch APIs bill half


class VLLMBackendConfig(Cfg):
    kind: Literal["vllm"] = "vllm"
    model: str
    adapters: dict[str, str] = Field(default_factory=dict)
    tensor_parallel_size: int = Field(default=1, ge=1)
    dtype: str = "auto"
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    temperature: float = Field(default=0.0, ge=0.0)
    seed: int = 0


BackendConfig = Annotated[
    HFBackendConfig | OpenAIBackendConfig | BatchBackendConfig | VLLMBackendConfig, Field(discriminator="kind")
]


# ---------------------------------------------------------------- dataset
class DatasetConfig(Cfg):
    path: str = "bundled"  # "bundled", a local .jsonl/.csv/.parquet, or a hub id (format: hub)
    format: Literal["auto", "jsonl", "csv", "parquet", "hub"] = "auto"
    split: str = "train"  # hub only
    subset: str | None = None  # hub only (config name)
    columns: dict[str, str] = Field(default_factory=dict)  # our field -> the file's column
    label_map: dict[str, Literal["safe", "unsafe"]] = Field(default_factory=dict)  # raw value -> label
    source: str | None = None  # source name recorded on samples (default: file stem)
    invalid: Literal["error", "skip"] = "error"
    require_label: bool = False
    limit: int | None = Field(default=None, ge=1)
    sample_n: int | None = Field(default=None, ge=1)  # seeded random subset (stratified by label)
    seed: int = 0


class ContentConfig(Cfg):
    max_chars: int = Field(default=6000, ge=200)  # longer content is cut with a visible marker
    images: bool = True  # False: images are off, the Preprocessor writes the neutral placeholder


class Price(Cfg):
    prompt_per_1m: float = Field(ge=0)
    completion_per_1m: float = Field(ge=0)


class GenerateConfig(Cfg):
    run_name: str = "run"
    output: str = "runs/transcripts.jsonl"
    dataset: DatasetConfig = Field(default_factory=DatasetConfig)
    protocol: dict[str, Any] = Field(default_factory=lambda: {"name": "aetheria"})
    backends: dict[str, BackendConfig] = Field(default_factory=lambda: {"default": HFBackendConfig()})
    roles: dict[str, str] = Field(default_factory=dict)  # role -> backend name ("default" otherwise)
    pricing: dict[str, Price] = Field(default_factory=dict)  # model name -> price per 1M tokens
    content: ContentConfig = Field(default_factory=ContentConfig)
    library: str | None = None  # a case-library folder (tribunal library build); None = no library
    limit: int | None = Field(default=None, ge=1)
    window: int = Field(default=64, ge=1)  # samples in flight at once: larger fills batches, smaller saves sooner
    progress: bool = True


# ---------------------------------------------------------------- loading
C = TypeVar("C", bound=BaseModel)


def _set_dotted(d: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    cur = d
    for k in keys[:-1]:
        nxt = cur.get(k)
        if nxt is None:
            nxt = cur[k] = {}
        if not isinstance(nxt, dict):
            raise ConfigError(f"override {dotted!r}: {k!r} is not a section")
        cur = nxt
    cur[keys[-1]] = value


def parse_overrides(overrides: list[str] | None) -> list[tuple[str, Any]]:
    out = []
    for o in overrides or []:
        if "=" not in o:
            raise ConfigError(f"override {o!r}: expected dotted.key=value")
        k, v = o.split("=", 1)
        out.append((k.strip(), yaml.safe_load(v) if v.strip() else ""))
    return out


def load_raw(path: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: config file not found")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    for k, v in parse_overrides(overrides):
        _set_dotted(raw, k, v)
    return raw


def format_validation_error(path: str | Path, e: ValidationError) -> str:
    lines = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"] if not (isinstance(p, str) and p in {"hf", "openai", "batch", "vllm"}))
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        lines.append(f"{path}: {loc}: {msg}")
    return "\n".join(lines)


def validate_config(raw: dict[str, Any], cls: type[C], path: str | Path = "<config>") -> C:
    try:
        return cls.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(format_validation_error(path, e)) from None


def load_config(path: str | Path, cls: type[C], overrides: list[str] | None = None) -> C:
    return validate_config(load_raw(path, overrides), cls, path)


def config_hash(cfg: BaseModel | dict) -> str:
    d = cfg.model_dump(mode="json") if isinstance(cfg, BaseModel) else cfg
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]
