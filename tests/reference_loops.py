"""The trainers' rollout loops, transcribed for the fidelity tests.

Each function follows its source line by line (see the docstrings), on
plain dicts and the tokenizer's own calls, and shares no code with
``engine``: the tests run it on the same generations as Rollscope's loop
and compare tokens, masks, logprobs, rewards and the prompts sent. The
server is a callable that takes the request payload and answers in the
server's own shape; the env is Rollscope's, seen through tau-bench's shape
(``TauShape``) or AReaL's (``success`` of an answer).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from engine.records.episode import Action as RAction
from engine.records.episode import Message

RESPOND_ACTION_NAME = "respond"
TOOL_INSTRUCTION = (
    " At each turn, you are allowed to call one or no function to assist "
    "with task execution using <tools></tools> XML tags.\n"
    "YOU MUST EXECUTE TOOLS TO MAKE ANY MODIFICATIONS OR CANCELLATIONS. "
    "Each tool call leads to a message returned by the system.\n"
    "NEVER confirm execution to the user without seeing confirmation "
    "from the tool system.\n"
)


# -- tau-bench's shape over a Rollscope env ---------------------------------------------


@dataclass
class EnvResponse:
    observation: str
    reward: float
    done: bool
    info: dict[str, Any]


@dataclass
class TauAction:
    name: str
    kwargs: dict[str, Any]


class TauShape:
    """A Rollscope env through tau-bench's interface: string observations, ``Action(name, kwargs)``."""

    def __init__(self, env: Any) -> None:
        self.env = env

    def reset(self, task_id: str) -> str:
        return "".join(m.content for m in self.env.reset(task_id))

    def step(self, action: TauAction) -> EnvResponse:
        if action.name == RESPOND_ACTION_NAME:
            a = RAction("respond", dict(action.kwargs), action.kwargs["content"])
        else:
            a = RAction(action.name, dict(action.kwargs))
        r = self.env.step(a)
        return EnvResponse("".join(m.content for m in r.observation), r.reward, r.done, dict(r.info))


# -- sglang's Qwen25Detector + FunctionCallParser.parse_non_stream ------------------------


def sglang_parse(text: str, tools_info: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    names = {t["function"]["name"] for t in tools_info}
    idx = text.find("<tool_call>")
    normal_text = text[:idx].strip() if idx != -1 else text
    calls: list[dict[str, Any]] = []
    if "<tool_call>" in text:
        for match_result in re.findall(r"<tool_call>(.*?)</tool_call>", text, re.DOTALL):
            action = json.loads(match_result)
            if not isinstance(action, list):
                action = [action]
            for act in action:
                name = act.get("name")
                if name and name in names:
                    calls.append({"name": name, "parameters": json.dumps(
                        act.get("parameters") or act.get("arguments", {}), ensure_ascii=False)})
    if calls:
        return normal_text, calls
    return text, []


def call_to_action_sglang(calls: list[dict[str, Any]], text_response: str) -> TauAction:
    action = TauAction(RESPOND_ACTION_NAME, {"content": text_response})
    if calls:
        tool_call = calls[0]
        params = json.loads(tool_call["parameters"])
        if isinstance(params, dict):
            action = TauAction(tool_call["name"], params)
    return action


# -- slime's token deltas ------------------------------------------------------------------


def seed_get_token_delta(tokenizer: Any, messages: list[dict]) -> tuple[list[int], list[int]]:
    """The seed's ``_get_token_delta`` (shared/seeds/slime_tau_trainable_agents.py.txt)."""
    curr = tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
    if messages[-1]["role"] == "assistant":
        prev = tokenizer.apply_chat_template(messages[:-1], add_generation_prompt=True, tokenize=False)
        new_tokens = tokenizer.encode(curr[len(prev):], add_special_tokens=False)
        return new_tokens, [1] * len(new_tokens)
    prev = tokenizer.apply_chat_template(messages[:-1], add_generation_prompt=False, tokenize=False)
    new_tokens = tokenizer.encode(curr[len(prev):], add_special_tokens=False)
    return new_tokens, [0] * len(new_tokens)


def current_get_token_delta(tokenizer: Any, messages: list[dict], *, include_generation_prompt: bool = False
                            ) -> tuple[list[int], list[int]]:
    """slime's ``examples/tau-bench/token_delta.py`` (current)."""
    if not messages:
        raise ValueError("Cannot calculate a token delta for an empty conversation")
    is_assistant = messages[-1]["role"] == "assistant"
    curr = tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
    if is_assistant:
        prev = tokenizer.apply_chat_template(messages[:-1], add_generation_prompt=False, tokenize=False)
        generation_prompt = tokenizer.apply_chat_template(messages[:-1], add_generation_prompt=True, tokenize=False)
        if not generation_prompt.startswith(prev):
            raise ValueError("Adding the assistant generation prompt rewrote the rendered conversation")
        if not curr.startswith(generation_prompt):
            raise ValueError("The assistant response does not extend its generation prompt")
        generation_prompt_text = generation_prompt[len(prev):]
        if not include_generation_prompt:
            new_tokens = tokenizer.encode(curr[len(generation_prompt):], add_special_tokens=False)
            return new_tokens, [1] * len(new_tokens)
        new_tokens = tokenizer.encode(curr[len(prev):], add_special_tokens=False)
        gp_len = len(tokenizer.encode(generation_prompt_text, add_special_tokens=False))
        masked = min(gp_len, len(new_tokens))
        return new_tokens, [0] * masked + [1] * (len(new_tokens) - masked)
    prev = tokenizer.apply_chat_template(messages[:-1], add_generation_prompt=False, tokenize=False)
    if curr.startswith(prev):
        new_text = curr[len(prev):]
    elif messages[-1]["role"] == "user":
        new_text = tokenizer.apply_chat_template([messages[-1]], add_generation_prompt=False, tokenize=False)
        if not curr.endswith(new_text):
            raise ValueError("The latest user message is not a standalone suffix of the rendered conversation")
    else:
        raise ValueError("The chat template rewrote history while calculating a non-user token delta")
    new_tokens = tokenizer.encode(new_text, add_special_tokens=False)
    return new_tokens, [0] * len(new_tokens)


@dataclass
class SlimeResult:
    status: str = "completed"
    reward: float = 0.0
    prompt_token_ids: list[int] = field(default_factory=list)
    response_token_ids: list[int] = field(default_factory=list)
    loss_masks: list[int] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def tokens(self) -> list[int]:
        return self.prompt_token_ids + self.response_token_ids


async def slime_asolve(tokenizer: Any, env: TauShape, task_id: str, generate: Any, tools_info: list[dict[str, Any]],
                       wiki: str, max_num_steps: int = 30, current: bool = True) -> SlimeResult:
    """``TrainableAgentMixin.asolve``: the seed (``current=False``) or today's, with ``token_delta.py``
    and the generation prompt of every assistant turn after the first included, masked 0. A ValueError
    of ``token_delta.py`` propagates in slime; here it ends the result with the message."""
    res = SlimeResult()

    def reformulate(text: str) -> str:
        return text.replace("You may call one or more functions to assist with the user query.", TOOL_INSTRUCTION)

    obs = env.reset(task_id)
    messages = [{"role": "system", "content": wiki}, {"role": "user", "content": obs}]
    prompt_text = reformulate(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                            tools=tools_info))
    res.prompt_token_ids = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
    res.messages = messages
    total_reward = 0.0
    env_response = None

    def delta(turn: int) -> None:
        if current:
            include = messages[-1]["role"] == "assistant" and turn > 0
            ids, mask = current_get_token_delta(tokenizer, messages, include_generation_prompt=include)
        else:
            ids, mask = seed_get_token_delta(tokenizer, messages)
        res.response_token_ids.extend(ids)
        res.loss_masks.extend(mask)

    try:
        for turn in range(max_num_steps):
            text_input = reformulate(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                                   tools=tools_info))
            res.sent.append(text_input)
            output = await generate({"text": text_input})
            if output["meta_info"]["finish_reason"]["type"] == "abort":
                res.status, res.reward = "aborted", total_reward
                return res
            response = output["text"]
            if response.endswith("<|im_end|>"):
                response = response[:-10]
            try:
                normal_text, calls = sglang_parse(response, tools_info)
            except Exception:
                res.status, res.reward = "aborted", total_reward
                return res
            messages.append({"role": "assistant", "content": response})
            delta(turn)
            action = call_to_action_sglang(calls, normal_text)
            try:
                env_response = env.step(action)
            except Exception:
                res.status, res.reward = "aborted", total_reward
                return res
            if action.name != RESPOND_ACTION_NAME:
                messages.append({"role": "tool", "name": action.name, "content": env_response.observation})
            else:
                messages.append({"role": "user", "content": env_response.observation})
            delta(turn)
            total_reward = env_response.reward
            if env_response.done:
                res.status = "completed"
                break
        if env_response is None or not env_response.done:
            res.status = "truncated"
    except ValueError as e:
        res.status, res.error = "aborted", str(e)
    res.reward = total_reward
    return res


# -- AReaL -----------------------------------------------------------------------------------


@dataclass
class ArealSeedResult:
    packed_input_ids: list[list[int]] = field(default_factory=list)
    prompt_mask: list[list[int]] = field(default_factory=list)
    packed_logprobs: list[list[float]] = field(default_factory=list)
    seq_no_eos_mask: list[bool] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    sent: list[list[int]] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)


async def areal_seed_collect(tokenizer: Any, prompt_token_ids: list[int], success_of: Any, generate: Any,
                             num_turns: int = 5, reward_scaling: float = 1.0, reward_bias: float = 0.0,
                             turn_level_discount: float = 1.0) -> ArealSeedResult:
    """realhf ``MathMultiTurnAgent.collect_trajectory`` (shared/seeds/areal_math_multi_turn_agent.py.txt).

    ``generate(token_ids)`` answers like realhf's generation server: ``seqs`` (prompt + generated),
    ``prompt_ids``, ``prompt_len``, ``logprobs`` (seqlen - 1 values, 0.0 over the prompt), ``no_eos``.
    """
    out = ArealSeedResult()
    token_ids = prompt_token_ids
    all_rewards: list[float] = []
    for _ in range(num_turns):
        out.sent.append(list(token_ids))
        act = await generate(token_ids)
        seq_strs = tokenizer.batch_decode(act["seqs"], clean_up_tokenization_spaces=False, skip_special_tokens=True)
        prompt_str = tokenizer.batch_decode([act["prompt_ids"]], clean_up_tokenization_spaces=False,
                                            skip_special_tokens=True)[0]
        answers = [seq_str.split(prompt_str)[1] for seq_str in seq_strs]
        success = [success_of(a) for a in answers]
        rewards = [((float(r) - 0.5) * 2 - reward_bias) * reward_scaling for r in success]
        out.answers.extend(answers)
        out.packed_input_ids.append(list(act["seqs"][0]))
        out.packed_logprobs.append(list(act["logprobs"][0]))
        out.seq_no_eos_mask.append(act["no_eos"][0])
        all_rewards.append(rewards[0])
        seqlen = len(act["seqs"][0])
        out.prompt_mask.append([1] * act["prompt_len"] + [0] * (seqlen - act["prompt_len"]))
        token_ids = list(act["seqs"][0])
        feedback = "Congratulations! You are correct!" if success[0] else \
            "Unfortunately your answer is wrong. Let's try again."
        feedback = "\n" + tokenizer.apply_chat_template([dict(content=feedback, role="user")],
                                                        add_generation_prompt=True, tokenize=False)
        feedback = tokenizer(feedback)["input_ids"]
        token_ids.extend(feedback)
    for i in reversed(range(len(all_rewards) - 1)):
        all_rewards[i] = all_rewards[i] + all_rewards[i + 1] * turn_level_discount
    out.rewards = all_rewards
    return out


@dataclass
class ArealResult:
    input_ids: list[int]
    logprobs: list[float]
    loss_mask: list[int]
    versions: list[int]
    reward: float
    turns: int
    sent: list[list[int]]


def _ids(x: Any) -> list[int]:
    return list(x["input_ids"] if hasattr(x, "keys") else x)


async def areal_multiturn(tokenizer: Any, messages: list[dict[str, Any]], reward_of: Any, generate: Any,
                          max_turns: int, turn_discount: float) -> ArealResult:
    """AReaL ``areal/workflow/multi_turn.py`` ``MultiTurnWorkflow`` (current): its ``__init__``'s retry ids
    and ``arun_episode``. ``generate(input_ids)`` answers like ``engine.agenerate``: ``input_tokens``,
    ``output_tokens``, ``output_logprobs``, ``output_versions``."""
    dummy = [{"role": "assistant", "content": "some random message."}]
    s1 = _ids(tokenizer.apply_chat_template(dummy, tokenize=True))
    dummy += [{"role": "user", "content": (
        "Your answer is either wrong or not parsable to the reward function. You may misunderstand the original "
        "question. Please carefully read the original question, check the previous errors, and try to answer it "
        "again.")}]
    s2 = _ids(tokenizer.apply_chat_template(dummy, tokenize=True, add_generation_prompt=True))
    multi_turn_prompt_ids = s2[len(s1):]

    seq: list[int] = []
    logprobs: list[float] = []
    loss_mask: list[int] = []
    versions: list[int] = []
    sent: list[list[int]] = []
    input_ids = _ids(tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True))
    t = 0
    reward = 0.0
    discount = 1.0
    while reward == 0.0 and t < max_turns:
        sent.append(list(input_ids))
        resp = await generate(input_ids)
        completions_str = tokenizer.decode(resp["output_tokens"])
        reward = reward_of(completions_str)
        input_len = len(resp["input_tokens"]) - len(seq)
        assert len(seq) == 0 or resp["input_tokens"][:-input_len] == seq
        seq += resp["input_tokens"][-input_len:] + resp["output_tokens"]
        logprobs += [0.0] * input_len + resp["output_logprobs"]
        loss_mask += [0] * input_len + [1] * len(resp["output_tokens"])
        versions += [-1] * input_len + resp["output_versions"]
        t += 1
        if reward == 0.0 and t < max_turns:
            input_ids = input_ids + resp["output_tokens"]
            if resp["output_tokens"] and resp["output_tokens"][-1] != tokenizer.eos_token_id:
                input_ids += [tokenizer.eos_token_id]
            input_ids += multi_turn_prompt_ids
            discount *= turn_discount
    return ArealResult(seq, logprobs, loss_mask, versions, float(reward * discount), t, sent)


def user_message(m: Message) -> dict[str, Any]:
    return {"role": m.role, "content": m.content}
