"""Trainer adapters: TRL (the real GRPOTrainer, one step with a tiny scripted model) and verl (the
agent loop against a stand-in of verl's AgentLoop interface; verl itself is not a test dependency)."""
from __future__ import annotations

import asyncio
import bisect
import importlib.util
import inspect
import json
import math
import os

import pytest
import torch

from cuda_gym_agents.adapters import verl as verl_adapter
from cuda_gym_agents.adapters.trl import (KernelEnvironmentFactory, KernelReward, KernelToolConfig, environment_rows,
                                          single_turn_rows)
from cuda_gym.envs import KernelEnv
from cuda_gym.tasks import get_task
from tests.helpers import CORRECT_BODY, GELU_TASK, native_candidate

GOOD = native_candidate(CORRECT_BODY)
WRONG = native_candidate("for (int64_t i = 0; i < n; ++i) y[i] = x[i];")


# ----------------------------------------------------------------------------------- TRL

def test_trl_environment_contract(cpu_evaluator):
    factory = KernelEnvironmentFactory(KernelToolConfig(backend="cpu", max_submissions=2), evaluator=cpu_evaluator)
    environment = factory()
    # TRL exposes every public method except reset / get_reward as a tool: only submit_kernel may be one
    public = {name for name, _ in inspect.getmembers(type(environment), predicate=inspect.isfunction)
              if not name.startswith("_")}
    assert public == {"reset", "submit_kernel", "get_reward"}
    from transformers.utils import get_json_schema  # what TRL renders the tool schema with

    schema = get_json_schema(environment.submit_kernel)["function"]
    assert schema["name"] == "submit_kernel" and schema["parameters"]["required"] == ["source"]
    assert schema["parameters"]["properties"]["source"]["type"] == "string"

    with pytest.raises(ValueError, match="task_id"):
        environment.reset(prompt=[])
    assert "not reset" in environment.submit_kernel(GOOD)
    prompt = environment.reset(task_id=GELU_TASK, prompt=[{"role": "user", "content": "x"}], level=1)
    assert "builtin/L1/gelu" in prompt and "class Model" in prompt
    assert environment.get_reward() == -1.0  # nothing submitted yet: the failure reward

    verdict = environment.submit_kernel("this is not python (")
    assert "INVALID_ACTION" in verdict and environment.rewards == [-1.0]
    verdict = environment.submit_kernel(GOOD)
    assert "OK" in verdict and environment.rewards[-1] >= 1.0
    assert environment.get_reward() == max(environment.rewards)
    assert "No submissions left" in environment.submit_kernel(GOOD)  # max_submissions=2 were used
    assert [r.error_code.value for _, r in environment.history] == ["INVALID_ACTION", "OK"]

    environment.reset(task_id=GELU_TASK)  # the next rollout starts clean
    assert environment.rewards == [] and environment.get_reward() == -1.0
    factory.close()  # the evaluator was passed in: still open
    assert not cpu_evaluator._closed


def test_trl_rows_and_single_turn_reward(cpu_evaluator):
    tasks = [get_task(GELU_TASK)]
    rows = environment_rows(tasks, max_submissions=3)
    assert rows[0]["task_id"] == GELU_TASK and rows[0]["prompt"][0]["role"] == "user"
    assert "3 calls" in rows[0]["prompt"][0]["content"]
    env = KernelEnv(backend="cpu", evaluator=cpu_evaluator)
    single = single_turn_rows(tasks, env)
    assert "class Model" in single[0]["prompt"][0]["content"] and "```python" in single[0]["prompt"][0]["content"]

    logged = {}
    reward = KernelReward(cpu_evaluator)
    completions = [
        [{"role": "assistant", "content": f"Here it is:\n```python\n{GOOD}```"}],   # conversational
        f"```python\n{WRONG}```",                                                   # standard
        "I cannot do this.",                                                        # no code
    ]
    rewards = reward(prompts=[single[0]["prompt"]] * 3, completions=completions, task_id=[GELU_TASK] * 3,
                     log_extra=lambda column, values: logged.setdefault(column, values),
                     log_metric=lambda name, value: logged.setdefault(name, value))
    assert rewards[0] >= 1.0 and rewards[1:] == [-1.0, -1.0]
    assert logged["verdict"][0] == "OK" and logged["verdict"][1] == "INCORRECT"
    assert logged["correct_rate"] == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="task_id"):
        reward(prompts=[], completions=[])


def _byte_tokenizer():
    """Bytes as tokens plus Qwen3's special tokens, with the Qwen3 chat template TRL ships (TRL
    knows how to parse its tool calls). Built here: nothing is downloaded."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen3_chat_template

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    core = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        additional_special_tokens=["<|im_start|>"], padding_side="left")
    tokenizer.add_tokens(["<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>",
                          "</tool_response>"])
    tokenizer.chat_template = qwen3_chat_template
    return tokenizer


def _scripted_model(tokenizer, scripts):
    """A tiny causal LM whose replies follow scripts: the first reply starts, with even odds, with
    scripts[0][0] or scripts[1][0] and then follows that script; later replies follow scripts[2].
    Its backbone writes the wanted next token as a one-hot-like hidden state; its LM head is a
    trainable square matrix initialised to the identity, so GRPO has real gradients to apply."""
    from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
    from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast

    marker = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)

    class ScriptedConfig(PretrainedConfig):
        model_type = "cuda_gym_test_scripted"

        def __init__(self, vocab_size=1, **kwargs):
            self.vocab_size = self.hidden_size = vocab_size
            self.num_hidden_layers = 1
            self.max_position_embeddings = 1 << 16
            super().__init__(**kwargs)

    class Backbone(PreTrainedModel):
        config_class = ScriptedConfig

        def __init__(self, config):
            super().__init__(config)
            self.post_init()

        def forward(self, input_ids=None, attention_mask=None, positions_to_keep=0, **kwargs):
            batch, length = input_ids.shape
            keep = min(int(positions_to_keep), length) if positions_to_keep else length
            hidden = torch.full((batch, keep, self.config.vocab_size), -30.0)
            for row in range(batch):
                ids = input_ids[row]
                found = (ids[: length - len(marker) + 1] == marker[0]).nonzero().flatten().tolist()
                starts = [i + len(marker) for i in found if ids[i:i + len(marker)].tolist() == marker]
                for t in range(max(length - keep, starts[0] - 1 if starts else length), length):
                    turn = bisect.bisect_right(starts, t + 1)
                    start = starts[turn - 1]
                    offset = t + 1 - start
                    if turn == 1 and offset == 0:
                        hidden[row, t - length + keep, [scripts[0][0], scripts[1][0]]] = 0.0
                        continue
                    script = scripts[2] if turn > 1 else scripts[1 if int(ids[start]) == scripts[1][0] else 0]
                    wanted = script[offset] if offset < len(script) else tokenizer.eos_token_id
                    hidden[row, t - length + keep, wanted] = 0.0
            return BaseModelOutputWithPast(last_hidden_state=hidden)

    class ScriptedLM(PreTrainedModel, GenerationMixin):
        config_class = ScriptedConfig
        base_model_prefix = "model"

        def __init__(self, config):
            super().__init__(config)
            self.model = Backbone(config)
            self.lm_head = torch.nn.Linear(config.vocab_size, config.vocab_size, bias=False)
            self.post_init()
            with torch.no_grad():
                self.lm_head.weight.copy_(torch.eye(config.vocab_size))

        def get_output_embeddings(self):
            return self.lm_head

        def forward(self, input_ids=None, attention_mask=None, logits_to_keep=0, **kwargs):
            hidden = self.model(input_ids=input_ids, positions_to_keep=logits_to_keep).last_hidden_state
            return CausalLMOutputWithPast(logits=self.lm_head(hidden))

    return ScriptedLM(ScriptedConfig(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id,
                                     pad_token_id=tokenizer.pad_token_id))


def test_grpo_trainer_step_through_the_environment(cpu_evaluator, tmp_path, monkeypatch):
    """One real GRPOTrainer step: TRL parses the scripted tool calls, our environments judge the
    candidates, get_reward scores the rollouts, and the loss moves the weights."""
    pytest.importorskip("trl")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    tokenizer = _byte_tokenizer()

    def tool_call(source):
        return "<tool_call>\n" + json.dumps({"name": "submit_kernel", "arguments": {"source": source}}) + "\n</tool_call>"

    scripts = [tokenizer.encode(text, add_special_tokens=False)
               for text in (tool_call(GOOD), "<think>a shortcut</think>" + tool_call(WRONG), "Done.")]
    model = _scripted_model(tokenizer, scripts)
    weights_before = model.lm_head.weight.detach().clone()
    factory = KernelEnvironmentFactory(KernelToolConfig(backend="cpu", max_submissions=2), evaluator=cpu_evaluator)
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, max_steps=1,
                      max_completion_length=4096, learning_rate=0.1, logging_steps=1, report_to="none",
                      save_strategy="no", gradient_checkpointing=False, use_cpu=True, bf16=False, seed=0,
                      max_tool_calling_iterations=2, generation_kwargs={"use_cache": False})
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the model is trivial: spare the machine's cores the thread hand-offs
    try:
        trainer = GRPOTrainer(model=model, args=args, processing_class=tokenizer, environment_factory=factory,
                              train_dataset=Dataset.from_list(environment_rows([get_task(GELU_TASK)], 2) * 4))
        trainer.train()
    finally:
        torch.set_num_threads(threads)

    used = [e for e in factory.environments if e.history]
    assert len(used) == 4  # every rollout called submit_kernel once, then answered "Done."
    verdicts = [r.error_code.value for e in used for _, r in e.history]
    assert set(verdicts) == {"INCORRECT", "OK"}  # the policy drew both scripts (seed 0: two of each)
    for environment in used:
        (_, result), = environment.history
        assert environment.get_reward() == (-1.0 if result.error_code.value == "INCORRECT" else
                                            environment.rewards[0])
        assert result.error_code.value == "INCORRECT" or environment.get_reward() >= 1.0
    logs = trainer.state.log_history[0]
    assert logs["tools/call_frequency"] == 1.0 and logs["tools/failure_frequency"] == 0.0
    assert logs["reward_std"] > 0 and math.isfinite(logs["loss"])
    assert not torch.equal(model.lm_head.weight.detach(), weights_before)  # the step changed the policy


# ----------------------------------------------------------------------------------- verl

class _StandInAgentLoopBase:
    """verl's AgentLoopBase as far as our loop uses it (verl 0.9.1): the constructor's keyword
    arguments, `self.config` from `trainer_config.config`, `server_manager`, `tokenizer`."""

    def __init__(self, trainer_config, server_manager, tokenizer, processor, dataset_cls, data_config, **kwargs):
        self.config = trainer_config.config
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        self.apply_chat_template_kwargs = {}


class _StandInOutput:
    """verl's AgentLoopOutput fields (a pydantic model there)."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


class _Namespace:
    def __init__(self, **items):
        self.__dict__.update(items)


class _ScriptedServer:
    """Stands in for verl's LLM server manager: replies from a script, records the prompts."""

    def __init__(self, tokenizer, replies):
        self.tokenizer = tokenizer
        self.replies = list(replies)
        self.prompts: list[list[int]] = []
        self.request_ids: set[str] = set()

    async def generate(self, *, request_id, prompt_ids, sampling_params, **kwargs):
        self.prompts.append(list(prompt_ids))
        self.request_ids.add(request_id)
        ids = self.tokenizer.encode(self.replies.pop(0), add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return _Namespace(token_ids=ids, log_probs=[-0.5] * len(ids))


def test_verl_agent_loop_plays_an_episode(cpu_evaluator, monkeypatch):
    tokenizer = _byte_tokenizer()
    registry = {}

    def register(name):
        def decorator(cls):
            registry[name] = f"{cls.__module__}.{cls.__qualname__}"
            return cls
        return decorator

    loop_cls = verl_adapter._build_agent_loop_class(_StandInAgentLoopBase, _StandInOutput, register)
    assert registry == {"cuda_gym_agent": "cuda_gym_agents.adapters.verl.CudaGymAgentLoop"}  # what hydra will import
    monkeypatch.setattr(verl_adapter, "shared_evaluator", lambda config: cpu_evaluator)

    env = KernelEnv(backend="cpu", evaluator=cpu_evaluator)
    (row,) = verl_adapter.verl_rows([get_task(GELU_TASK)], env)
    assert row["agent_name"] == "cuda_gym_agent" and row["extra_info"]["task_id"] == GELU_TASK
    replies = ["Let me check a first version.\n#! check\n```python\n" + WRONG + "```",
               "Fixed.\n#! submit\n```python\n" + GOOD + "```",
               "never used"]
    server = _ScriptedServer(tokenizer, replies)
    trainer_config = _Namespace(config=_Namespace(actor_rollout_ref=_Namespace(
        rollout=_Namespace(response_length=20000))))
    agent_loop = loop_cls(trainer_config, server, tokenizer, None, None, _Namespace(config={}),
                          cuda_gym={"backend": "cpu", "max_turns": 3})
    output = asyncio.run(agent_loop.run({"temperature": 1.0}, raw_prompt=row["prompt"], extra_info=row["extra_info"],
                                        agent_name="cuda_gym_agent", index=0))

    steps = output.extra_fields["steps"]
    assert [(s["command"], s["verdict"]) for s in steps] == [("check", "INCORRECT"), ("submit", "OK")]
    assert output.reward_score == max(s["reward"] for s in steps) and output.reward_score >= 1.0
    assert output.num_turns == 5 and len(server.prompts) == 2 and len(server.request_ids) == 1
    # the response is the two replies' tokens (mask 1) around the feedback's template tokens (mask 0)
    first_reply = tokenizer.encode(replies[0], add_special_tokens=False) + [tokenizer.eos_token_id]
    assert output.response_ids[:len(first_reply)] == first_reply
    assert len(output.response_ids) == len(output.response_mask) == len(output.response_logprobs)
    masked = [i for i, m in enumerate(output.response_mask) if m == 0]
    assert masked and masked[0] == len(first_reply)
    feedback = tokenizer.decode([output.response_ids[i] for i in masked])
    assert "INCORRECT" in feedback and "<|im_start|>assistant" in feedback
    assert all(output.response_logprobs[i] == 0.0 for i in masked)
    assert server.prompts[1] == output.prompt_ids + output.response_ids[:len(server.prompts[1]) - len(output.prompt_ids)]


def test_verl_episode_without_a_judged_step_and_bad_config(cpu_evaluator):
    tokenizer = _byte_tokenizer()
    env = KernelEnv(backend="cpu", evaluator=cpu_evaluator, max_turns=2)
    server = _ScriptedServer(tokenizer, ["x" * 50])

    async def generate(prompt_ids, params):
        output = await server.generate(request_id="r", prompt_ids=prompt_ids, sampling_params=params)
        return output.token_ids, None

    (row,) = verl_adapter.verl_rows([get_task(GELU_TASK)], env)
    # a reply longer than the response budget is cut, not judged: the episode scores a failure
    episode = asyncio.run(verl_adapter.play_episode(env, GELU_TASK, row["prompt"], generate, tokenizer, {}, 20))
    assert episode.reward_score == -1.0 and episode.extra_fields["steps"] == []
    assert len(episode.response_ids) == 20 and episode.response_logprobs is None
    with pytest.raises(ValueError, match="extra_info.task_id"):
        verl_adapter.task_id_of({"extra_info": {}})
    with pytest.raises(ValueError, match="unknown cuda_gym agent-loop settings"):
        verl_adapter.VerlLoopConfig.from_mapping({"max_turn": 3})
    assert verl_adapter.VerlLoopConfig.from_mapping({"levels": [1, 2]}).levels == (1, 2)


@pytest.mark.skipif(importlib.util.find_spec("verl") is None,
                    reason="verl is not installed (not a CI dependency: it pins its own transformers)")
def test_verl_real_agent_loop_interface(cpu_evaluator, monkeypatch):
    """Against verl itself, where it is installed. The LLM server is still the scripted
    stand-in: no vLLM / SGLang here."""
    import verl.experimental.agent_loop.agent_loop as agent_loop_module
    import hydra
    from omegaconf import OmegaConf

    loop_cls = verl_adapter.CudaGymAgentLoop
    assert issubclass(loop_cls, agent_loop_module.AgentLoopBase)
    assert agent_loop_module._agent_loop_registry["cuda_gym_agent"] == {
        "_target_": "cuda_gym_agents.adapters.verl.CudaGymAgentLoop"}
    monkeypatch.setattr(verl_adapter, "shared_evaluator", lambda config: cpu_evaluator)

    tokenizer = _byte_tokenizer()
    env = KernelEnv(backend="cpu", evaluator=cpu_evaluator)
    (row,) = verl_adapter.verl_rows([get_task(GELU_TASK)], env)
    server = _ScriptedServer(tokenizer, ["#! submit\n```python\n" + GOOD + "```"])
    # an agent_loop_config_path entry, instantiated the way verl's AgentLoopWorker does it
    entry = OmegaConf.create({"name": "cuda_gym_agent", "_target_": "cuda_gym_agents.adapters.verl.CudaGymAgentLoop",
                              "cuda_gym": {"backend": "cpu", "max_turns": 2}})
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 16384, "response_length": 20000}},
                               "data": {}})
    agent_loop = hydra.utils.instantiate(
        config=entry, trainer_config=agent_loop_module.DictConfigWrap(config=config), server_manager=server,
        tokenizer=tokenizer, processor=None, hf_model_type=None, dataset_cls=None,
        data_config=agent_loop_module.DictConfigWrap(config.data), tools=agent_loop_module.ToolListWrap([]))
    assert isinstance(agent_loop, loop_cls) and agent_loop.cuda_gym_config.max_turns == 2
    output = asyncio.run(agent_loop.run({"temperature": 1.0}, raw_prompt=row["prompt"], extra_info=row["extra_info"],
                                        agent_name="cuda_gym_agent", index=0))
    assert isinstance(output, agent_loop_module.AgentLoopOutput)  # verl's pydantic model accepted our fields
    assert [s["verdict"] for s in output.extra_fields["steps"]] == ["OK"] and output.reward_score >= 1.0
    batch = output.as_dict()  # what verl's postprocessing reads
    assert batch["rm_scores"][-1] == pytest.approx(output.reward_score)
    assert batch["responses"].tolist() == output.response_ids and int(batch["response_mask"].sum()) == len(
        output.response_ids)
