"""Guard-model baselines (Llama Guard 3, ShieldGemma, WildGuard): a local scorer and the protocol base.

Why the guard protocols bypass the runner's backends
----------------------------------------------------
A guard model is scored from its next-token distribution (P("unsafe") for Llama Guard, softmax over
the "Yes"/"No" logits for ShieldGemma), and it must see its official prompt string byte for byte, not a
chat rendered by some other template. The chat backends return text only, render their own chat
template, and the runner's ``Turn`` has no place for token probabilities. So a guard protocol owns a
``LocalGuardScorer`` (a causal LM loaded by path or hub id through ``agents.models``) and calls it
directly: its generator returns the verdict without yielding, the runner finishes the item at its first
step, and the protocol appends the turn(s) itself, with ``backend.kind = "local-guard"``, the exact
prompt string as the single user message, the generated text as the output, token counts and latency.
Resume, the errors file, ids and usage totals still come from the runner. What is lost is cross-item
batching (each item is one forward pass; ShieldGemma batches its policies); the model loads once, on
the first item (tests pass a ready scorer as ``resources={"guard_scorer": scorer}``).

Text under review goes into the official templates unchanged except that control-token look-alikes
(``<|eot_id|>``, ``<start_of_turn>``, ``[/INST]``, ``<s>``...) are defanged, so the content cannot close
the template's turn and write its own verdict. The guards' templates are their own data delimiters: we
do not add ours (that would change the prompt the guard was trained on).
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import ClassVar, Literal

from agents.protocols.base import Context, Protocol, ProtocolConfig, ProtocolRun
from data.records import BackendRef, Message, Turn, Usage, Verdict

_CONTROL = re.compile(
    r"<\|[A-Za-z0-9_]{1,40}\|>"  # <|eot_id|>, <|user|>, <|begin_of_text|> ...
    r"|</?(?:start|end)_of_turn>|</?s>|<(?:bos|eos|pad)>"  # Gemma / Mistral markers
    r"|\[/?INST\]"  # [INST] ... [/INST]
    r"|<(?:BEGIN|END) (?:CONVERSATION|UNSAFE CONTENT CATEGORIES)>",  # Llama Guard section markers
    re.IGNORECASE,
)
_DEFANG = str.maketrans({"<": "‹", ">": "›", "[": "⟦", "]": "⟧"})


def defang(text: str) -> tuple[str, int]:
    """Neutralise template control tokens inside content. Returns (text, number of markers changed)."""
    n = 0

    def sub(m: re.Match) -> str:
        nonlocal n
        n += 1
        return m.group(0).translate(_DEFANG)

    return _CONTROL.sub(sub, text), n


@dataclass
class ChoiceProbs:
    """Next-token probabilities of two answer options after a context (e.g. "Yes" vs "No")."""

    options: tuple[str, str]
    token_ids: tuple[int, int]  # the token each option starts with, after the context
    tokens: tuple[str, str]
    p_raw: tuple[float, float]  # softmax over the full vocabulary

    @property
    def p_first(self) -> float:
        """P(first option) normalised over the two options = softmax over their two logits."""
        a, b = self.p_raw
        return a / (a + b) if a + b > 0 else 0.5

    def as_dict(self) -> dict:
        return {"options": list(self.options), "tokens": list(self.tokens), "token_ids": list(self.token_ids),
                "p_raw": [round(p, 8) for p in self.p_raw], "p_first_normalised": round(self.p_first, 8)}


@dataclass
class Generation:
    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float


class LocalGuardScorer:
    """A causal LM used as a classifier: next-token option probabilities and greedy generation.

    Independent of the agents runner and backends; batches with left padding and explicit position ids,
    so a padded row scores exactly like the same prompt alone.
    """

    def __init__(self, model, tokenizer, *, name: str = "local", batch_size: int = 8):
        self.model, self.tokenizer, self.name, self.batch_size = model, tokenizer, name, batch_size
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token

    @classmethod
    def load(cls, model: str, *, revision: str | None = None, dtype: str = "float32", device: str = "cpu",
             load_in_4bit: bool = False, load_in_8bit: bool = False, batch_size: int = 8) -> LocalGuardScorer:
        from agents.models import load_causal_lm, load_tokenizer

        tok = load_tokenizer(model, revision=revision)
        lm = load_causal_lm(model, revision=revision, dtype=dtype, device=device, load_in_4bit=load_in_4bit,
                            load_in_8bit=load_in_8bit)
        return cls(lm, tok, name=model, batch_size=batch_size)

    @property
    def device(self):
        return next(self.model.parameters()).device

    def ids(self, text: str, add_special_tokens: bool) -> list[int]:
        return self.tokenizer(text, add_special_tokens=add_special_tokens).input_ids

    def option_token_id(self, context: str, option: str, add_special_tokens: bool) -> int:
        """The token an answer option starts with, as the model would emit it right after the context.

        1. the option is one token on its own (``"Yes"`` in Gemma, ``" yes"`` in byte-level BPE): that
           token, which is the model card's ``vocab['Yes']``;
        2. else, when ``context + option`` tokenises as the context's tokens plus more (SentencePiece
           with a leading space, e.g. ``"▁yes"``): the first of those extra tokens;
        3. else (a multi-token option whose tokenisation shifts the context's last token): the
           option's own first token.
        """
        alone = self.ids(option, False)
        if len(alone) == 1:
            return alone[0]
        ctx_ids = self.ids(context, add_special_tokens)
        full = self.ids(context + option, add_special_tokens)
        if full[: len(ctx_ids)] == ctx_ids and len(full) > len(ctx_ids):
            return full[len(ctx_ids)]
        if not alone:
            raise ValueError(f"option {option!r} has no tokens")
        return alone[0]

    def option_token_ids(self, context: str, options: tuple[str, str], add_special_tokens: bool) -> tuple[int, int]:
        out = [self.option_token_id(context, opt, add_special_tokens) for opt in options]
        if out[0] == out[1]:
            raise ValueError(f"options {options} start with the same token {out[0]}: cannot tell them apart")
        return out[0], out[1]

    def _encode(self, texts: list[str], add_special_tokens: bool):
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=add_special_tokens)
        enc = enc.to(self.device)
        position_ids = (enc.attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        return enc, position_ids

    def next_token_probs(self, contexts: list[str], *, add_special_tokens: bool):
        """Softmax over the vocabulary of the token after each context: a float32 tensor [n, vocab]."""
        import torch

        rows = []
        for s in range(0, len(contexts), self.batch_size):
            enc, pos = self._encode(contexts[s : s + self.batch_size], add_special_tokens)
            with torch.inference_mode():
                logits = self.model(input_ids=enc.input_ids, attention_mask=enc.attention_mask,
                                    position_ids=pos).logits[:, -1, :]
            rows.append(torch.softmax(logits.float(), dim=-1).cpu())
        return torch.cat(rows) if rows else torch.empty(0)

    def choice_probs(self, contexts: list[str], options: tuple[str, str], *,
                     add_special_tokens: bool) -> list[ChoiceProbs]:
        probs = self.next_token_probs(contexts, add_special_tokens=add_special_tokens)
        out = []
        for ctx, row in zip(contexts, probs):
            a, b = self.option_token_ids(ctx, options, add_special_tokens)
            toks = tuple(self.tokenizer.convert_ids_to_tokens([a, b]))
            out.append(ChoiceProbs(options=options, token_ids=(a, b), tokens=toks,
                                   p_raw=(float(row[a]), float(row[b]))))
        return out

    def generate(self, prompts: list[str], *, max_new_tokens: int, add_special_tokens: bool) -> list[Generation]:
        """Greedy decoding; the text stops at the first end-of-sequence token."""
        import torch

        stop = {t for t in (self.tokenizer.eos_token_id, self.tokenizer.pad_token_id) if t is not None}
        gc_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        stop |= {gc_eos} if isinstance(gc_eos, int) else set(gc_eos or [])
        out = []
        for s in range(0, len(prompts), self.batch_size):
            chunk = prompts[s : s + self.batch_size]
            t0 = time.perf_counter()
            enc, _ = self._encode(chunk, add_special_tokens)
            with torch.inference_mode():
                seqs = self.model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, temperature=None,
                                           top_p=None, top_k=None, pad_token_id=self.tokenizer.pad_token_id)
            dt = (time.perf_counter() - t0) / len(chunk)
            for row in range(len(chunk)):
                toks = seqs[row, enc.input_ids.shape[1]:].tolist()
                n = next((j for j, t in enumerate(toks) if t in stop), len(toks))
                out.append(Generation(text=self.tokenizer.decode(toks[:n], skip_special_tokens=True),
                                      prompt_tokens=int(enc.attention_mask[row].sum()),
                                      completion_tokens=min(n + 1, len(toks)), latency_s=dt))
        return out


# ---------------------------------------------------------------------------------------------- protocol
class GuardConfig(ProtocolConfig):
    model: str  # local path or hub id of the guard checkpoint
    revision: str | None = None
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "float32"
    device: str = "cpu"  # "cpu", "cuda", "cuda:1", or "auto" (device_map)
    load_in_4bit: bool = False
    load_in_8bit: bool = False
    batch_size: int = 8


@dataclass
class GuardInput:
    """What a text-only guard sees: the user prompt and (for response classification) the response."""

    prompt: str
    response: str | None
    defanged: int = 0
    image_description: bool = False


def guard_input(ctx: Context) -> GuardInput:
    """The prepared (truncated) content; an image description is appended to the user text in brackets."""
    c = ctx.content
    prompt = c.prompt or c.text
    if c.image_description:
        prompt = (prompt + "\n" if prompt else "") + f"[Image description: {c.image_description}]"
    response = c.response if ctx.sample.subject != "prompt" else None
    prompt, n1 = defang(prompt)
    n2 = 0
    if response is not None:
        response, n2 = defang(response)
    return GuardInput(prompt=prompt, response=response, defanged=n1 + n2,
                      image_description=bool(c.image_description))


class LocalGuardProtocol(Protocol):
    """Base for guard protocols: a lazily loaded scorer, and turns that record what the guard saw."""

    roles: ClassVar[tuple[str, ...]] = ()  # no chat backend: configs use ``backends: {}``
    role: ClassVar[str] = "guard"

    def __init__(self, cfg: GuardConfig):
        super().__init__(cfg)
        self._scorer: LocalGuardScorer | None = None

    def scorer(self, ctx: Context) -> LocalGuardScorer:
        given = ctx.resources.get("guard_scorer")
        if given is not None:
            return given
        if self._scorer is None:
            c: GuardConfig = self.cfg
            self._scorer = LocalGuardScorer.load(c.model, revision=c.revision, dtype=c.dtype, device=c.device,
                                                 load_in_4bit=c.load_in_4bit, load_in_8bit=c.load_in_8bit,
                                                 batch_size=c.batch_size)
        return self._scorer

    def run(self, ctx: Context) -> ProtocolRun:
        return self.judge(ctx, self.scorer(ctx))
        yield []  # unreachable: makes run() a generator, which the runner finishes at its first step

    def judge(self, ctx: Context, scorer: LocalGuardScorer) -> Verdict:  # pragma: no cover - abstract
        raise NotImplementedError

    def record(self, ctx: Context, scorer: LocalGuardScorer, *, step: str, prompt: str, output: str,
               prompt_tokens: int, completion_tokens: int, latency_s: float, parsed: dict,
               parse_error: str | None = None) -> Turn:
        turn = Turn(step=step, role=self.role, backend=BackendRef(kind="local-guard", model=scorer.name),
                    messages=[Message(role="user", content=prompt)], output=output, parsed=parsed,
                    parse_error=parse_error, usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens),
                    latency_s=round(latency_s, 6))
        ctx.transcript.turns.append(turn)
        return turn
