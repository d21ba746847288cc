"""A Qwen2.5-style chat template for the tests, over the real Qwen3 vocabulary.

Like Qwen2.5's own template it adds a default system prompt when the first
message is not a system message, puts the tools in the system message, and
renders tool results as a user turn of ``<tool_response>`` blocks. That
default system prompt is what AReaL's realhf feedback tokenization copies
into the middle of a trajectory.
"""

QWEN25_STYLE = r"""
{%- set default_system = 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' -%}
{%- if tools -%}
    {{- '<|im_start|>system\n' -}}
    {{- messages[0]['content'] if messages[0]['role'] == 'system' else default_system -}}
    {{- '\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
    {%- for tool in tools -%}{{- '\n' + (tool | tojson) -}}{%- endfor -%}
    {{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' -}}
{%- elif messages[0]['role'] == 'system' -%}
    {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' -}}
{%- else -%}
    {{- '<|im_start|>system\n' + default_system + '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
    {%- if message['role'] == 'user' or (message['role'] == 'system' and not loop.first) -%}
        {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}
    {%- elif message['role'] == 'assistant' -%}
        {{- '<|im_start|>assistant' -}}
        {%- if message['content'] -%}{{- '\n' + message['content'] -}}{%- endif -%}
        {%- for tool_call in message['tool_calls'] or [] -%}
            {%- set call = tool_call['function'] if tool_call['function'] is defined else tool_call -%}
            {{- '\n<tool_call>\n{"name": "' + call['name'] + '", "arguments": ' + (call['arguments'] | tojson) + '}\n</tool_call>' -}}
        {%- endfor -%}
        {{- '<|im_end|>\n' -}}
    {%- elif message['role'] == 'tool' -%}
        {%- if loop.index0 == 0 or messages[loop.index0 - 1]['role'] != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
        {{- '\n<tool_response>\n' + message['content'] + '\n</tool_response>' -}}
        {%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
"""


# Like SmolLM3's template: every conversation opens with a system block that names the reasoning mode, from the
# ``enable_thinking`` kwarg (true unless given), and a default instruction that is longer in thinking mode; the
# generation prompt opens an empty think block when thinking is off. So the default block depends on the
# chat-template kwargs: verl measures it without them.
SMOLLM3_STYLE = r"""
{%- set think = enable_thinking if enable_thinking is defined else true -%}
{{- '<|im_start|>system\n## Metadata\n\nReasoning Mode: ' + ('/think' if think else '/no_think') + '\n\n## Custom Instructions\n\n' -}}
{%- if messages[0]['role'] == 'system' -%}
    {{- messages[0]['content'] -}}
{%- elif think -%}
    {{- 'You are a helpful AI assistant named SmolLM, trained by Hugging Face. Your role as an assistant involves thoroughly exploring questions through a systematic thinking process before providing the final precise and accurate solutions.' -}}
{%- else -%}
    {{- 'You are a helpful AI assistant named SmolLM, trained by Hugging Face.' -}}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- for message in messages -%}
    {%- if message['role'] == 'user' -%}
        {{- '<|im_start|>user\n' + message['content'] + '<|im_end|>\n' -}}
    {%- elif message['role'] == 'assistant' -%}
        {{- '<|im_start|>assistant\n' + message['content'] + '<|im_end|>\n' -}}
    {%- elif message['role'] == 'tool' -%}
        {{- '<|im_start|>user\n<tool_response>\n' + message['content'] + '\n</tool_response><|im_end|>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' + ('' if think else '<think>\n\n</think>\n') -}}
{%- endif -%}
"""

# Like Llama 3.1's template, in ChatML: the system block names today's date, from the ``date_string`` kwarg
# ("26 Jul 2024" unless given). A longer date than the default leaves the end of the block in every answer verl
# cuts by the length it measured without the kwargs.
DATED_STYLE = r"""
{%- if date_string is not defined -%}{%- set date_string = '26 Jul 2024' -%}{%- endif -%}
{{- '<|im_start|>system\nCutting Knowledge Date: December 2023\nToday Date: ' + date_string + '\n\n' -}}
{{- messages[0]['content'] if messages[0]['role'] == 'system' else 'You are a helpful assistant.' -}}
{{- '<|im_end|>\n' -}}
{%- for message in messages -%}
    {%- if message['role'] == 'user' or message['role'] == 'assistant' -%}
        {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}
    {%- elif message['role'] == 'tool' -%}
        {{- '<|im_start|>user\n<tool_response>\n' + message['content'] + '\n</tool_response><|im_end|>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
"""
