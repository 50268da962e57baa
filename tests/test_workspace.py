"""The CUDA Agent workspace (cuda_gym/envs/workspace_env.py), its multi-file candidates
(cuda_gym/extension.py, candidate.pack_workdir) and the tool-calling ReAct agent, on the CPU."""
from __future__ import annotations

import json
import re
from pathlib import Path

import gymnasium as gym
import pytest

import cuda_gym  # noqa: F401 - registers the IDs
from cuda_gym.envs.workspace_env import TOOL_SCHEMAS, WorkspaceEnv
from cuda_gym.eval.candidate import InvalidCandidate, pack_workdir, unpack_files
from cuda_gym.extension import BINDING_REGISTRY_H, ExtensionError, load_extension
from cuda_gym.native import KernelSignatureError
from cuda_gym.tasks import get_task, solution_path

from .helpers import GELU_TASK

SOFTMAX_TASK = "builtin/L1/softmax"
SOFTMAX_WORKDIR = Path(__file__).resolve().parent.parent / "benchmarks" / "candidates" / "workspace_softmax"


def call(name: str, **arguments) -> str:
    return json.dumps({"name": name, "arguments": arguments})


def softmax_files() -> dict[str, str]:
    return {p.relative_to(SOFTMAX_WORKDIR).as_posix(): p.read_text() for p in sorted(SOFTMAX_WORKDIR.rglob("*"))
            if p.is_file()}


def test_registered_ids_and_tool_schemas():
    for suffix in ("Builtin", "L1", "L2", "L3", "Ops6K", "Synth"):
        spec = gym.spec(f"CudaKernelWorkspace-{suffix}-v1")
        assert spec.entry_point == "cuda_gym.envs.workspace_env:WorkspaceEnv"
        assert spec.kwargs["reward_mode"] == "final" and spec.kwargs["max_turns"] == 40
    names = [s["function"]["name"] for s in TOOL_SCHEMAS]
    assert names == ["list_files", "read_file", "write_file", "edit_file", "compile", "verify", "profile", "submit"]
    for schema in TOOL_SCHEMAS:
        assert schema["type"] == "function" and schema["function"]["description"]
        parameters = schema["function"]["parameters"]
        assert parameters["type"] == "object" and parameters["additionalProperties"] is False
        assert parameters["required"] == list(parameters["properties"])
        assert all(p["type"] == "string" and p["description"] for p in parameters["properties"].values())
    by_name = {s["function"]["name"]: s["function"]["parameters"] for s in TOOL_SCHEMAS}
    assert by_name["edit_file"]["required"] == ["path", "old", "new"] and by_name["submit"]["properties"] == {}


def test_scripted_episode_writes_a_shipped_solution_verifies_and_submits(cpu_evaluator):
    env = gym.make("CudaKernelWorkspace-Builtin-v1", backend="cpu", evaluator=cpu_evaluator)
    observation, info = env.reset(options={"task_id": GELU_TASK})
    workdir = Path(info["workdir"])
    assert "GUIDE.md" in observation and "class Model" in observation and info["max_turns"] == 40
    assert sorted(p.relative_to(workdir).as_posix() for p in workdir.rglob("*") if p.is_file()) == [
        "GUIDE.md", "kernels/binding_registry.h", "model.py"]
    assert (workdir / "model.py").read_text().startswith(get_task(GELU_TASK).source.rstrip())
    assert env.unwrapped.tool_schemas == TOOL_SCHEMAS

    solution = solution_path(get_task(GELU_TASK), "cpu").read_text()
    observation, reward, terminated, truncated, info = env.step(call("write_file", path="model_new.py",
                                                                      content=solution))
    assert info["verdict"] == "TOOL_OK" and "created model_new.py" in observation and reward == 0
    assert (workdir / "model_new.py").read_text() == solution
    observation, reward, terminated, truncated, info = env.step(call("read_file", path="model_new.py"))
    assert solution.strip() in observation
    observation, reward, terminated, truncated, info = env.step(call("verify"))
    assert info["command"] == "check" and info["verdict"] == "OK" and info["result"]["error_code"] == "OK"
    assert info["result"]["correct"] and len(info["result"]["trials"]) == 5 and "Correct on every input draw" in observation
    assert reward == 0 and not terminated  # final mode: the reward comes at the end
    observation, reward, terminated, truncated, info = env.step(call("submit"))
    assert terminated and not truncated and info["command"] == "submit" and info["verdict"] == "OK"
    assert reward >= 1 and info["result"]["speedup_vs_eager"] > 0 and "The episode is over." in observation
    assert info["best"]["found"] and info["best"]["candidate"] == solution  # a single file: sent as it is
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(call("list_files"))
    env.close()
    assert not workdir.exists()  # removed with the episode


def test_bad_calls_get_error_results_and_never_raise(tmp_path):
    env = WorkspaceEnv(backend="cpu", max_turns=30, max_file_chars=1000, max_files=5, workdir_root=tmp_path)
    observation, info = env.reset(options={"task_id": GELU_TASK})
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    cases = [
        ("{not json", "INVALID_ACTION", "not valid JSON"),
        ("[1, 2]", "INVALID_ACTION", 'a string "name"'),
        (call("bash", command="ls"), "INVALID_ACTION", "unknown tool 'bash'; the tools are: list_files"),
        (call("read_file"), "INVALID_ACTION", "read_file takes path: missing path"),
        (call("read_file", path="model.py", extra="x"), "INVALID_ACTION", "unknown extra"),
        (json.dumps({"name": "read_file", "arguments": {"path": 3}}), "INVALID_ACTION", "must be a string"),
        (json.dumps({"name": "read_file", "arguments": "{\"path\": "}), "INVALID_ACTION", "not valid JSON"),
        (call("read_file", path="../outside.txt"), "TOOL_ERROR", "leaves the workdir"),
        (call("read_file", path="kernels/../../outside.txt"), "TOOL_ERROR", "leaves the workdir"),
        (call("read_file", path=str(outside)), "TOOL_ERROR", "absolute paths cannot be used"),
        (call("write_file", path="../escape.py", content="x"), "TOOL_ERROR", "leaves the workdir"),
        (call("read_file", path="missing.py"), "TOOL_ERROR", "missing.py does not exist"),
        (call("write_file", path="model.py", content="x"), "TOOL_ERROR", "model.py is read-only"),
        (call("write_file", path="kernels/binding_registry.h", content="x"), "TOOL_ERROR", "read-only"),
        (call("write_file", path="model_new.py", content="x" * 1001), "TOOL_ERROR", "at most 1000"),
        (call("write_file", path="kernels", content="x"), "TOOL_ERROR", "kernels is a folder"),
        (call("edit_file", path="model.py", old="nothing like this", new=""), "TOOL_ERROR", "read-only"),
        (call("compile"), "INVALID_ACTION", "the workdir has no model_new.py"),
        (call("submit"), "INVALID_ACTION", "the workdir has no model_new.py"),
    ]
    for action, verdict, text in cases:
        observation, reward, terminated, truncated, info = env.step(action)
        assert info["verdict"] == verdict, (action, observation)
        assert text in observation, (action, observation)
        assert info["tool_error"] and not terminated and not truncated and reward == 0
    assert outside.read_text() == "secret" and not (tmp_path / "escape.py").exists()
    # edit_file: the old text must occur exactly once.
    env.step(call("write_file", path="notes.md", content="a a b"))
    _, _, _, _, info = env.step(call("edit_file", path="notes.md", old="a", new="c"))
    assert info["verdict"] == "TOOL_ERROR"
    observation, _, _, _, info = env.step(call("edit_file", path="notes.md", old="b", new="c"))
    assert info["verdict"] == "TOOL_OK" and (env.workdir / "notes.md").read_text() == "a a c"
    assert env.step(call("write_file", path="extra0.txt", content="x"))[4]["verdict"] == "TOOL_OK"
    observation, _, _, _, info = env.step(call("write_file", path="extra1.txt", content="x"))  # a 6th file
    assert info["verdict"] == "TOOL_ERROR" and "holds 5 files, the limit" in observation
    assert "extra1.txt" not in env.step(call("list_files"))[0]
    env.close()


def test_out_of_turns_without_a_judged_candidate_gets_the_failure_reward(tmp_path):
    env = WorkspaceEnv(backend="cpu", max_turns=2, workdir_root=tmp_path)
    env.reset(options={"task_id": GELU_TASK})
    assert env.step(call("list_files"))[1:4] == (0.0, False, False)
    observation, reward, terminated, truncated, info = env.step("oops")
    assert (reward, terminated, truncated) == (-1.0, False, True) and "The episode is over." in observation
    env.close()


def test_pack_workdir_round_trip_and_hash_covers_every_file():
    files = softmax_files()
    del files["kernels/softmax.cu"]
    candidate = pack_workdir(files)
    assert candidate.form == "multifile" and len(candidate.source.splitlines()) == len(
        files["model_new.py"].splitlines()) + 1
    assert unpack_files(candidate) == files
    changed = dict(files, **{"kernels/softmax.cpp": files["kernels/softmax.cpp"].replace("double s", "double  s")})
    assert pack_workdir(changed).hash != candidate.hash
    # Without kernels the candidate is model_new.py itself.
    single = solution_path(get_task(GELU_TASK), "cpu").read_text()
    assert pack_workdir({"model_new.py": single}).source == single
    # __future__ imports move onto the first line; line numbers of model_new.py stay line + 1.
    future = "from __future__ import annotations\n" + files["model_new.py"]
    packed = pack_workdir(dict(files, **{"model_new.py": future}))
    assert packed.source.startswith("from __future__ import annotations; from cuda_gym.extension")
    compile(packed.source, "candidate.py", "exec")
    with pytest.raises(InvalidCandidate, match="imports cuda_extension, but kernels/ has no sources"):
        pack_workdir({"model_new.py": files["model_new.py"]})
    with pytest.raises(InvalidCandidate, match="no model_new.py"):
        pack_workdir({"kernels/a.cpp": ""})
    with pytest.raises(InvalidCandidate, match="ModelNew"):
        pack_workdir({"model_new.py": "import torch\n"})
    with pytest.raises(ExtensionError, match="no sub-folders"):
        pack_workdir({"model_new.py": files["model_new.py"], "kernels/sub/a.cpp": "int x;"})
    with pytest.raises(ExtensionError, match="no \\*_binding.cpp"):
        pack_workdir({"model_new.py": files["model_new.py"], "kernels/a.cpp": "int x;"})
    with pytest.raises(ExtensionError, match="fixed registry"):
        pack_workdir({**files, "kernels/binding_registry.h": BINDING_REGISTRY_H + "// mine\n"})


def test_registry_rejects_bindings_that_are_not_c_abi(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_GYM_KERNEL_CACHE", str(tmp_path))
    binding = ('#include "binding_registry.h"\n'
               "REGISTER_BINDING(void, scale, (float& x)) { x *= 2.f; }\n")
    with pytest.raises(KernelSignatureError, match=r"REGISTER_BINDING void scale\(float& x\).*references"):
        load_extension({"kernels/scale_binding.cpp": binding})
    nothing = '#include "binding_registry.h"\nint helper() { return 1; }\n'
    with pytest.raises(ExtensionError, match="no entry point is registered"):
        load_extension({"kernels/empty_binding.cpp": nothing})


def test_multifile_episode_compile_error_fix_verify_profile(cpu_evaluator, tmp_path):
    env = WorkspaceEnv(backend="cpu", evaluator=cpu_evaluator, reward_mode="per_step", workdir_root=tmp_path)
    env.reset(options={"task_id": SOFTMAX_TASK})
    files = softmax_files()
    for path, text in files.items():
        assert env.step(call("write_file", path=path, content=text))[4]["verdict"] == "TOOL_OK"
    broken = files["kernels/softmax.cpp"].replace("double s = 0.0;", "double s = 0.0 +;")
    line = broken.splitlines().index("        double s = 0.0 +;") + 1
    env.step(call("write_file", path="kernels/softmax.cpp", content=broken))
    observation, reward, terminated, truncated, info = env.step(call("compile"))
    assert info["verdict"] == "COMPILE_ERROR" and reward == -1 and not terminated
    assert f"kernels/softmax.cpp:{line}:" in observation  # workdir paths, not build-cache paths
    assert "note: kernels/softmax.cu is left out" in observation
    observation, _, _, _, info = env.step(call("edit_file", path="kernels/softmax.cpp", old="double s = 0.0 +;",
                                               new="double s = 0.0;"))
    assert info["verdict"] == "TOOL_OK"
    observation, reward, _, _, info = env.step(call("compile"))
    assert info["verdict"] == "COMPILED" and reward == 0
    observation, reward, _, _, info = env.step(call("verify"))
    assert info["verdict"] == "OK" and reward == 1 and info["command"] == "check"
    assert unpack_files(info["candidate"])["kernels/softmax.cpp"] == files["kernels/softmax.cpp"]
    observation, reward, terminated, _, info = env.step(call("profile"))
    assert info["verdict"] == "OK" and info["command"] == "eval" and not terminated and reward >= 1
    assert "PyTorch eager:" in observation and "speedup" in observation
    assert "Per-kernel device times need the CUDA backend" in observation
    assert info["best"]["fully_timed"] and info["best"]["turn"] == info["turn"]
    # A runtime error in model_new.py names model_new.py's own line.
    model = files["model_new.py"].replace("        cols = x.size(-1)\n", "        cols = x.size(-1)\n        1 / 0\n")
    env.step(call("write_file", path="model_new.py", content=model))
    observation, reward, _, _, info = env.step(call("verify"))
    zero_line = model.splitlines().index("        1 / 0") + 1
    assert info["verdict"] == "RUNTIME_ERROR" and reward == -1
    assert "ZeroDivisionError" in observation and f'"model_new.py", line {zero_line}' in observation
    env.close()


# ------------------------------------------------------------------------ the tool-calling agent

def test_parse_tool_calls_from_text():
    from cuda_gym_agents.llm import parse_tool_calls

    text = ('I will look.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "GUIDE.md"}}\n</tool_call>'
            '<tool_call>not json</tool_call><tool_call>{"name": "verify", "arguments": {}}</tool_call>')
    assert parse_tool_calls(text) == [{"id": "call_0", "name": "read_file", "arguments": '{"path": "GUIDE.md"}'},
                                      {"id": "call_1", "name": "verify", "arguments": "{}"}]
    assert parse_tool_calls('{"name": "submit", "arguments": {}}')[0]["name"] == "submit"
    assert parse_tool_calls("no call here") == [] and parse_tool_calls('{"path": 1}') == []


def test_tool_policy_shortens_old_file_contents_to_fit_the_context(tmp_path):
    from cuda_gym_agents.llm import ChatReply, SamplingConfig, ScriptedChat
    from cuda_gym_agents.react import ReactConfig, ToolReactPolicy

    def reply(index, name, **arguments):
        return ChatReply(text="", finish_reason="stop", tool_calls=[
            {"id": f"c{index}", "name": name, "arguments": json.dumps(arguments)}])

    big = "// filler\n" * 900  # ~9900 characters
    chat = ScriptedChat([reply(i, "write_file", path=f"notes{i}.md", content=big) for i in range(3)],
                        sampling=SamplingConfig(max_new_tokens=100))
    env = WorkspaceEnv(backend="cpu", max_turns=3, workdir_root=tmp_path)
    trajectory = ToolReactPolicy(ReactConfig(context_tokens=9000)).play(env, chat, get_task(GELU_TASK))
    env.close()
    assert trajectory.end_reason == "max_turns" and [t.error_code for t in trajectory.turns] == ["TOOL_OK"] * 3
    assert all(t.tool_calls and t.tool_calls[0]["name"] == "write_file" for t in trajectory.turns)
    assert all(tools is not None and len(tools) == 8 for tools in chat.tools)
    last = chat.calls[-1]
    assistants = [m for m in last if m["role"] == "assistant"]
    assert len(assistants) == 2 and "characters omitted to save context" in assistants[0]["tool_calls"][0][
        "function"]["arguments"]
    assert json.loads(assistants[-1]["tool_calls"][0]["function"]["arguments"])["content"] == big  # the latest whole
    assert [m["tool_call_id"] for m in last if m["role"] == "tool"] == ["c0", "c1"]
    assert chat.count_tokens(last, tools=chat.tools[-1]) <= 9000 - 100


def test_transformers_chat_renders_tools_through_the_chat_template():
    pytest.importorskip("transformers")
    from cuda_gym_agents.llm import TransformersChat

    from .test_agents_transformers import tiny_chat_model

    model, tokenizer = tiny_chat_model(["read_file GUIDE.md tools list_files verify"])
    tokenizer.chat_template = (
        "{% if tools %}<s>tools\n{% for t in tools %}{{ t.function.name }} {% endfor %}</s>\n{% endif %}"
        "{% for m in messages %}<s>{{ m.role }}\n{{ m.content }}"
        "{% for c in m.tool_calls or [] %}[{{ c.function.name }} {{ c.function.arguments.path }}]{% endfor %}</s>\n"
        "{% endfor %}{% if add_generation_prompt %}<s>assistant\n{% endif %}")
    chat = TransformersChat(model, tokenizer)
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c0", "type": "function", "function": {"name": "read_file",
                                                                  "arguments": '{"path": "GUIDE.md"}'}}]},
                {"role": "tool", "tool_call_id": "c0", "content": "the guide"}]
    with_tools = tokenizer.decode(chat._prompt_ids(messages, TOOL_SCHEMAS))
    assert with_tools.startswith("<s>tools\nlist_files read_file write_file edit_file compile verify")
    assert "[read_file GUIDE.md]" in with_tools  # JSON-text arguments reach the template as an object
    assert chat.count_tokens(messages, TOOL_SCHEMAS) > chat.count_tokens(messages)


def test_cuda_gym_agent_drives_the_workspace_through_openai_tool_calls(tmp_path, monkeypatch, capsys, cache_dir):
    pytest.importorskip("openai")
    from cuda_gym.trajectory import read_trajectories
    from cuda_gym.cli import main

    from .test_agents_openai import ChatServer, quick_evaluator_config

    monkeypatch.setenv("CUDA_GYM_CACHE", cache_dir)
    quick_evaluator_config(monkeypatch)
    solution = solution_path(get_task(GELU_TASK), "cpu").read_text()

    def tool_reply(body, *calls):
        response = ChatServer.completion(body, "")
        response["choices"][0]["message"]["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
            for i, (name, arguments) in enumerate(calls)]
        response["choices"][0]["finish_reason"] = "tool_calls"
        return ("raw", response)

    def script(body, index):
        played = sum(1 for m in body["messages"] if m["role"] == "assistant")
        return [lambda: tool_reply(body, ("read_file", {"path": "GUIDE.md"})),
                lambda: tool_reply(body, ("write_file", {"path": "model_new.py", "content": solution}),
                                   ("list_files", {})),
                lambda: "I will verify now, without a call.",
                lambda: tool_reply(body, ("verify", {})),
                lambda: tool_reply(body, ("submit", {}))][played]() if played < 5 else ("status", 400)

    server = ChatServer(script)
    out = tmp_path / "run"
    try:
        code = main(["agent", "--env", "workspace", "--base-url", server.base_url, "--model", "tool-model",
                     "--tasks", GELU_TASK, "--backend", "cpu", "--out", str(out), "--no-compile-baseline",
                     "--no-progress"])
    finally:
        server.close()
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert all(len(r["tools"]) == 8 and r["tools"][0]["function"]["name"] == "list_files" for r in server.requests)
    (trajectory,) = read_trajectories(out / "trajectories.jsonl")
    assert trajectory.end_reason == "submit" and trajectory.max_turns == 40
    assert [t.error_code for t in trajectory.turns] == ["TOOL_OK", "TOOL_OK", "INVALID_ACTION", "OK", "OK"]
    assert [t.command for t in trajectory.turns] == [None, None, None, "check", "submit"]
    assert [[c["name"] for c in t.tool_calls or []] for t in trajectory.turns] == [
        ["read_file"], ["write_file", "list_files"], [], ["verify"], ["submit"]]
    assert "# Workflow guide" in trajectory.turns[0].observation
    assert trajectory.turns[4].reward >= 1 and trajectory.best().correct and trajectory.best().candidate == solution
    # The conversation the server saw: tool results answer their call ids; the second call was not run.
    last = server.requests[-1]["messages"]
    tool_messages = [m for m in last if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_0", "call_0", "call_1", "call_0"]
    assert "created model_new.py" in tool_messages[1]["content"] and "not run" in tool_messages[2]["content"]
    assert any(m["role"] == "user" and "not valid JSON" in m["content"] for m in last)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pass_rate"] == 1.0 and summary["config"]["env"] == "workspace"


@pytest.mark.gpu
def test_cuda_agent_layout_is_judged_and_profiled_on_cuda(cuda_evaluator, tmp_path):
    env = WorkspaceEnv(backend="cuda", evaluator=cuda_evaluator, reward_mode="per_step", workdir_root=tmp_path,
                       eval_config=cuda_evaluator.config.replace(baselines=("eager", "compile")))
    env.reset(options={"task_id": SOFTMAX_TASK})
    for path, text in softmax_files().items():
        assert env.step(call("write_file", path=path, content=text))[4]["verdict"] == "TOOL_OK"
    observation, reward, _, _, info = env.step(call("verify"))
    assert info["verdict"] == "OK" and reward == 1, observation
    assert "note: kernels/softmax.cpp is left out: it is the cpu twin of kernels/softmax.cu" in observation
    observation, reward, _, _, info = env.step(call("profile"))
    assert info["verdict"] == "OK", observation
    assert any("softmax_rows" in k["name"] for k in info["result"]["kernel_profile"])
    assert "reference (PyTorch eager):" in observation and "your candidate:" in observation
    for label in ("reference (PyTorch eager)", "reference (torch.compile)", "your candidate"):
        assert re.search(re.escape(label) + r": [\d.]+ ms device time in \d+ kernel\(s\), \d+% of the timed median",
                         observation), (label, observation)
    # The torch.compile reference is profiled where Inductor's code runs (the baseline worker):
    # its table holds the generated Triton kernels, not eager's softmax kernel.
    reference = env.reference_profile()
    compiled = [k["name"] for k in reference["compile"]["kernel_profile"] or []]
    assert any("triton" in name for name in compiled), reference["compile"]
    assert not any("SoftMaxForward" in name for name in compiled), compiled
    assert any("SoftMaxForward" in k["name"] for k in reference["eager"]["kernel_profile"]), reference["eager"]
    env.close()


def test_profile_agreement_names_a_host_bound_held_median():
    from cuda_gym.envs.workspace_env import profile_agreement

    kernels = [{"name": "k", "total_us": 100.0, "count": 2}, {"name": "j", "total_us": 50.0, "count": 1}]
    held = profile_agreement(kernels, 0.3, {"held_device_ms": 0.16, "held_issue_ms": 0.3})
    assert held["kernel_sum_ms"] == pytest.approx(0.15) and held["ratio"] == pytest.approx(0.5)
    assert held["ratio_to_held_device"] == pytest.approx(0.9375) and held["host_bound"]
    device_bound = profile_agreement(kernels, 0.16, {"held_device_ms": 0.155, "held_issue_ms": 0.05})
    assert not device_bound["host_bound"]
    assert set(profile_agreement(kernels, 0.3, {})) == {"kernel_sum_ms", "ratio"}  # open timing: no held numbers
    assert profile_agreement(kernels, None, None) == {"kernel_sum_ms": pytest.approx(0.15)}
