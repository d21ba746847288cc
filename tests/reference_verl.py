"""verl's ToolAgentLoop, transcribed for the fidelity tests; shares no code with ``engine``.

Followed line by line from ``volcengine/verl``: ``verl/experimental/agent_loop/tool_agent_loop.py``
(``run``, ``_handle_pending_state``, ``_handle_generating_state``, ``_handle_processing_tools_state``,
``_handle_interacting_state``, ``_call_tool``), ``AgentLoopBase.apply_chat_template`` in ``agent_loop.py``,
``initialize_system_prompt`` in ``verl/utils/chat_template.py``, ``HermesToolParser`` in
``agent_loop/tool_parser.py``, the pydantic models of ``verl/tools/schemas.py`` (real pydantic here),
``Gsm8kInteraction`` and ``verl/utils/reward_score/gsm8k.py``. The server, the tools and the user are
callables the test feeds from a recorded episode.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel

# -- verl/tools/schemas.py -----------------------------------------------------------------


class OpenAIFunctionPropertySchema(BaseModel):
    type: str
    description: str | None = None
    enum: list[str] | None = None


class OpenAIFunctionParametersSchema(BaseModel):
    type: str
    properties: dict[str, OpenAIFunctionPropertySchema]
    required: list[str]


class OpenAIFunctionSchema(BaseModel):
    name: str
    description: str
    parameters: OpenAIFunctionParametersSchema
    strict: bool = False


class OpenAIFunctionToolSchema(BaseModel):
    type: str
    function: OpenAIFunctionSchema


# -- verl/experimental/agent_loop/agent_loop.py: what an agent loop returns ------------------------


class AgentLoopMetrics(BaseModel):
    generate_sequences: float = 0.0
    tool_calls: float = 0.0
    num_preempted: int = -1


class AgentLoopOutput(BaseModel):
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None = None
    routed_experts: Any | None = None
    multi_modal_data: dict[str, Any] | None = None
    reward_score: float | None = None
    num_turns: int = 0
    metrics: AgentLoopMetrics
    extra_fields: dict[str, Any] = {}


class FunctionCall(BaseModel):
    arguments: str
    name: str


# -- verl/utils/chat_template.py, AgentLoopBase.apply_chat_template ------------------------------


def _ids(out: Any) -> list[int]:
    # transformers 5 returns a BatchEncoding from tokenize=True; verl's normalize_token_ids takes input_ids
    if hasattr(out, "keys"):
        out = out["input_ids"]
    return list(out)


def initialize_system_prompt(tokenizer: Any, **apply_chat_template_kwargs: Any) -> list[int]:
    token1 = _ids(tokenizer.apply_chat_template([{"role": "user", "content": ""}], add_generation_prompt=False,
                                                tokenize=True))
    token2 = _ids(tokenizer.apply_chat_template([{"role": "user", "content": ""}] * 2, add_generation_prompt=False,
                                                tokenize=True))
    return token1[: -(len(token2) - len(token1))]


class Loop:
    def __init__(self, tokenizer: Any, tools: list[dict[str, Any]], *, response_length: int = 512,
                 max_assistant_turns: int | None = None, max_user_turns: int | None = None,
                 max_parallel_calls: int = 1, max_tool_response_length: int = 256,
                 tool_response_truncate_side: str = "middle", apply_chat_template_kwargs: dict | None = None) -> None:
        self.tokenizer = tokenizer
        self.apply_chat_template_kwargs = apply_chat_template_kwargs or {}
        self.system_prompt = initialize_system_prompt(tokenizer, **self.apply_chat_template_kwargs)
        self.tool_schemas = [OpenAIFunctionToolSchema.model_validate(t).model_dump(exclude_unset=True, exclude_none=True)
                             for t in tools]
        self.tool_names = {t["function"]["name"] for t in tools}
        self.response_length = response_length
        self.max_assistant_turns = max_assistant_turns
        self.max_user_turns = max_user_turns
        self.max_parallel_calls = max_parallel_calls
        self.max_tool_response_length = max_tool_response_length
        self.tool_response_truncate_side = tool_response_truncate_side
        self.tool_call_regex = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)

    def apply_chat_template(self, messages: list[dict], tools: list | None = None,
                            remove_system_prompt: bool = False) -> list[int]:
        prompt_ids = _ids(self.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                                             tokenize=True, **self.apply_chat_template_kwargs))
        if remove_system_prompt:
            prompt_ids = prompt_ids[len(self.system_prompt):]
        return prompt_ids

    # HermesToolParser.extract_tool_calls
    def extract_tool_calls(self, responses_ids: list[int]) -> list[FunctionCall]:
        text = self.tokenizer.decode(responses_ids)
        if "<tool_call>" not in text or "</tool_call>" not in text:
            return []
        function_calls = []
        for match in self.tool_call_regex.findall(text):
            try:
                function_call = json.loads(match)
                name, arguments = function_call["name"], function_call["arguments"]
                function_calls.append(FunctionCall(name=name, arguments=json.dumps(arguments, ensure_ascii=False)))
            except Exception:
                pass
        return function_calls

    async def call_tool(self, tool_call: FunctionCall, execute: Callable[[str, Any], Awaitable[tuple[str, float]]]
                        ) -> tuple[str, float, str]:
        """(text as appended, tool reward, the tool's raw text before truncation or the error as worded)."""
        try:
            tool_name = tool_call.name
            tool_args = json.loads(tool_call.arguments)
            if tool_name not in self.tool_names:
                raise KeyError(tool_name)
            text, tool_reward = await execute(tool_name, tool_args)
        except Exception as e:
            return f"Error when executing tool: {e}", 0.0, f"Error when executing tool: {e}"
        raw = text
        if text and len(text) > self.max_tool_response_length:
            if self.tool_response_truncate_side == "left":
                text = text[: self.max_tool_response_length] + "...(truncated)"
            elif self.tool_response_truncate_side == "right":
                text = "(truncated)..." + text[-self.max_tool_response_length:]
            else:
                length = self.max_tool_response_length // 2
                text = text[:length] + "...(truncated)..." + text[-length:]
        return text, tool_reward, raw

    async def run(self, messages: list[dict], generate: Callable[[list[int]], Awaitable[tuple[list[int], list | None]]],
                  execute: Callable[[str, Any], Awaitable[tuple[str, float]]],
                  interaction: Callable[[list[dict]], Awaitable[tuple[bool, str, float]]]) -> dict[str, Any]:
        prompt_ids = self.apply_chat_template(messages, tools=self.tool_schemas)
        initial_prompt_length = len(prompt_ids)
        response_mask: list[int] = []
        response_logprobs: list[float] = []
        turn_scores: list[float] = []
        tool_rewards: list[float] = []
        user_turns = assistant_turns = 0
        sent: list[list[int]] = []
        raw_rounds: list[list[str]] = []  # what each tool round's calls returned, before truncation
        answers: list[str] = []  # the interaction's answers, in order
        ended_by_interaction = False
        while True:
            # GENERATING
            sent.append(list(prompt_ids))
            response_ids, log_probs = await generate(prompt_ids)
            assistant_turns += 1
            prompt_ids = prompt_ids + response_ids
            response_mask += [1] * len(response_ids)
            if log_probs:
                response_logprobs += log_probs
            if len(response_mask) >= self.response_length:
                break
            if self.max_assistant_turns and assistant_turns >= self.max_assistant_turns:
                break
            if self.max_user_turns and user_turns >= self.max_user_turns:
                break
            tool_calls = self.extract_tool_calls(response_ids)
            messages.append({"role": "assistant",
                             "content": self.tokenizer.decode(response_ids, skip_special_tokens=True)})
            if tool_calls:
                # PROCESSING_TOOLS
                add_messages = []
                raw_rounds.append([])
                for tool_call in tool_calls[: self.max_parallel_calls]:
                    text, tool_reward, raw = await self.call_tool(tool_call, execute)
                    raw_rounds[-1].append(raw)
                    add_messages.append({"role": "tool", "content": text or ""})
                    if tool_reward is not None:
                        tool_rewards.append(tool_reward)
                messages.extend(add_messages)
                ids = self.apply_chat_template(add_messages, remove_system_prompt=True)
                if len(response_mask) + len(ids) >= self.response_length:
                    break
                prompt_ids = prompt_ids + ids
                response_mask += [0] * len(ids)
                if response_logprobs:
                    response_logprobs += [0.0] * len(ids)
                user_turns += 1
                continue
            # INTERACTING
            should_terminate, answer, reward = await interaction(messages)
            user_turns += 1
            answers.append(answer)
            add = [{"role": "user", "content": answer}]
            messages.extend(add)
            if reward is not None:
                turn_scores.append(reward)
            ids = self.apply_chat_template(add, remove_system_prompt=True)
            prompt_ids = prompt_ids + ids
            response_mask += [0] * len(ids)
            if response_logprobs:
                response_logprobs += [0.0] * len(ids)
            if should_terminate:
                ended_by_interaction = True
                break
        response_ids = prompt_ids[initial_prompt_length:]
        return {
            "prompt_ids": prompt_ids[:initial_prompt_length],
            "response_ids": response_ids[: self.response_length],
            "response_mask": response_mask[: self.response_length],
            "response_logprobs": response_logprobs[: self.response_length] if response_logprobs else None,
            "num_turns": user_turns + assistant_turns + 1,
            "extra_fields": {"turn_scores": turn_scores, "tool_rewards": tool_rewards},
            "sent": sent,
            "raw_observation": raw_rounds,
            "answers": answers,
            "ended_by_interaction": ended_by_interaction,
        }


# -- verl/utils/reward_score/gsm8k.py, verl/interactions/gsm8k_interaction.py -------------------

_SOLUTION_CLIP_CHARS = 300


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    if len(solution_str) > _SOLUTION_CLIP_CHARS:
        solution_str = solution_str[-_SOLUTION_CLIP_CHARS:]
    if method == "strict":
        solutions = re.findall("#### (\\-?[0-9\\.\\,]+)", solution_str)
        if len(solutions) == 0:
            return None
        return solutions[-1].replace(",", "").replace("$", "")
    answer = re.findall("(\\-?[0-9\\.\\,]+)", solution_str)
    final_answer = None
    if len(answer) == 0:
        return None
    for final_answer in reversed(answer):
        if final_answer not in ["", "."]:
            break
    return final_answer


def compute_score(solution_str: str, ground_truth: str, method: str = "strict", format_score: float = 0.0,
                  score: float = 1.0) -> float:
    answer = extract_solution(solution_str=solution_str, method=method)
    if answer is None:
        return 0
    return score if answer == ground_truth else format_score


def gsm8k_generate_response(messages: list[dict], ground_truth: str) -> tuple[bool, str, float]:
    content = ""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "assistant":
            content = messages[i].get("content")
            break
    response = content if content and content.startswith("#### ") else "#### " + (content or "")
    reward = compute_score(response, ground_truth, method="flexible", format_score=0.0, score=1.0)
    if reward == 1.0:
        return True, "Your response is correct!", reward
    return False, "Your response is incorrect! You need to reflect on your answer and try again.", reward
