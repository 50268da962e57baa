"""`TransformersChat`: a local checkpoint through its chat template and `generate`."""
from __future__ import annotations

import json
import os
import threading
from typing import Any

from .base import BackendError, ChatBackend, ChatReply, Message, SamplingConfig, parse_tool_calls


class TransformersChat(ChatBackend):
    """A causal LM and its tokenizer in this process (CPU or GPU).

    Build it from objects (`TransformersChat(model, tokenizer)`) or from a local checkpoint folder
    (`TransformersChat.from_pretrained(path)`; nothing is downloaded: the path must exist). The
    tokenizer must have a chat template.

    Every reply records:
    - `prompt_token_ids`: `tokenizer.apply_chat_template(messages, add_generation_prompt=True)`,
      exactly the ids passed to `generate`;
    - `token_ids`: the sampled ids (the end-of-sequence token included when generation stopped on it);
    - `logprobs`: `log_softmax(logits)` of the model's raw next-token logits at generation time,
      gathered at each sampled id: the model's own distribution, before temperature and top-p
      (as vLLM's default `raw_logprobs`), so a forward pass over prompt + generated ids recomputes them.

    Function calling: `chat(messages, tools=[...])` renders the OpenAI function schemas through the
    chat template's `tools` argument (`apply_chat_template(messages, tools=...)`; assistant tool
    calls' JSON-text arguments are given to the template as objects, as Hugging Face templates
    expect), and the reply's `<tool_call>{...}</tool_call>` blocks (the Hermes / Qwen format;
    `cuda_gym_agents.llm.parse_tool_calls`) become `ChatReply.tool_calls`. A template that ignores `tools`
    shows the model no schemas.

    Generation is serialised (one call at a time per instance), so threads can share it.
    """

    name = "transformers"

    def __init__(self, model: Any, tokenizer: Any, *, sampling: SamplingConfig | None = None,
                 model_name: str | None = None):
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("the tokenizer has no chat_template; use an instruction-tuned checkpoint or set "
                             "tokenizer.chat_template to a Jinja template")
        self._model = model
        self._tokenizer = tokenizer
        self.sampling = sampling or SamplingConfig()
        self.model = model_name or getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__
        self._lock = threading.Lock()
        eos = getattr(model.generation_config, "eos_token_id", None)
        if eos is None:
            eos = tokenizer.eos_token_id
        self._eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos]) - {None}
        self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (
            min(self._eos_ids) if self._eos_ids else 0)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, *, device: str = "auto", dtype: str = "auto",
                        sampling: SamplingConfig | None = None, model_name: str | None = None) -> "TransformersChat":
        """Load a local checkpoint folder (config, weights, tokenizer with a chat template).

        device: "auto" (cuda when available, else cpu), "cpu", "cuda" or "cuda:N". dtype: "auto"
        (the checkpoint's), "float32", "bfloat16" or "float16". model_name: the name recorded in
        trajectories (default: the path).
        """
        path = os.fspath(path)
        if not os.path.isdir(path):
            raise FileNotFoundError(f"checkpoint folder {path!r} does not exist; pass a local folder with config.json, "
                                    "the weights and the tokenizer files (nothing is downloaded)")
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError:
            raise ImportError("TransformersChat needs transformers: pip install 'cuda_gym[agents]'") from None
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        torch_dtype = dtype if dtype == "auto" else getattr(torch, dtype)
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, local_files_only=True).to(device)
        model.eval()
        return cls(model, tokenizer, sampling=sampling, model_name=model_name or path)

    def _prompt_ids(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> list[int]:
        options: dict[str, Any] = {"tools": tools} if tools else {}
        encoded = self._tokenizer.apply_chat_template(_template_messages(messages), add_generation_prompt=True,
                                                      tokenize=True, return_dict=True, **options)
        return list(encoded["input_ids"])

    def count_tokens(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> int:
        return len(self._prompt_ids(messages, tools))

    def chat(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> ChatReply:
        import torch

        sampling = self.sampling
        with self._lock:
            try:
                prompt_ids = self._prompt_ids(messages, tools)
                device = next(self._model.parameters()).device
                input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
                sample = sampling.temperature > 0
                options: dict[str, Any] = {"do_sample": sample, "max_new_tokens": sampling.max_new_tokens,
                                           "output_logits": True, "return_dict_in_generate": True,
                                           "pad_token_id": self._pad_id}
                if sample:
                    options.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
                if sampling.seed is not None:
                    torch.manual_seed(sampling.seed)
                with torch.inference_mode():
                    output = self._model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                                  **options)
                generated = output.sequences[0, len(prompt_ids):]
                logits = torch.stack(output.logits, dim=0)[:, 0, :].float()
                logprobs = torch.log_softmax(logits, dim=-1).gather(1, generated[:, None].to(logits.device))[:, 0]
            except (RuntimeError, ValueError) as exc:  # out of memory, a prompt longer than the model takes
                raise BackendError(f"generation with {self.model} failed: {type(exc).__name__}: {exc}") from None
        token_ids = [int(t) for t in generated.tolist()]
        stopped = bool(token_ids) and token_ids[-1] in self._eos_ids
        text = self._tokenizer.decode(token_ids, skip_special_tokens=True)
        # Tool-call tags may be special tokens that the text above leaves out: parse the raw decode.
        tool_calls = parse_tool_calls(self._tokenizer.decode(token_ids, skip_special_tokens=False)) if tools else []
        return ChatReply(text=text, finish_reason="stop" if stopped else "length", prompt_token_ids=prompt_ids,
                         token_ids=token_ids, logprobs=[float(v) for v in logprobs.tolist()],
                         usage={"prompt_tokens": len(prompt_ids), "completion_tokens": len(token_ids)},
                         tool_calls=tool_calls or None)


def _template_messages(messages: list[Message]) -> list[Message]:
    """Messages as Hugging Face chat templates take them: tool calls' arguments as objects."""
    converted = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            message = dict(message, tool_calls=[_template_call(c) for c in calls])
        converted.append(message)
    return converted


def _template_call(call: dict[str, Any]) -> dict[str, Any]:
    function = dict(call.get("function") or {})
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            function["arguments"] = json.loads(arguments)
        except json.JSONDecodeError:
            pass  # not JSON: the template gets the text as the model wrote it
    return dict(call, function=function)
