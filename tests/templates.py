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
