"""Agent framework adapters: turn :class:`~console_bridge.ToolHandle` s into a framework's own tools.

One module per framework, each behind its extra, each importing its framework only
when it is imported itself (``import console_bridge`` never imports a framework)::

    console_bridge.adapters.openai_agents.function_tools(handles)    # the [openai-agents] extra
    console_bridge.adapters.langchain.langchain_tools(handles)       # the [langchain] extra
    console_bridge.adapters.pydantic_ai.pydantic_ai_tools(handles)   # the [pydantic-ai] extra
    console_bridge.adapters.anthropic.tool_params(handles)           # the [anthropic] extra
    console_bridge.adapters.anthropic.run_tool_uses(message, handles)

Every adapter keeps each handle's exact JSON input schema, calls the handle under its
owner's :func:`~console_bridge.run_context`, gives the model the result text (and
images where the framework carries them), and turns a :class:`~console_bridge.BridgeError`
into the framework's tool-error convention so the model sees what went wrong and the
run goes on, except :class:`~console_bridge.ConnectionClosed` and
:class:`~console_bridge.OwnerMismatch`, which propagate and stop the run.
"""

__all__: list[str] = []
