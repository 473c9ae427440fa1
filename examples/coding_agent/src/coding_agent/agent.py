"""The coding agent: an `AgentLoop` with the workspace tools and a model.

The model is the OpenAI-compatible one when the environment configures it
(`TURNKEEP_OPENAI_MODEL`, see `turnkeep.agent.openai_compat`), else the scripted
demo model, so the agent runs offline by default.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from coding_agent.manifest import WorkspaceManifest, store_paths
from coding_agent.script import scripted_model
from coding_agent.tools import workspace_tools
from coding_agent.workspace import Workspace
from turnkeep import AgentLoop, Host, Model, SessionEvent, Tool

__all__ = ["AGENT_ID", "INSTRUCTIONS", "MANIFEST_PLUGIN", "choose_model", "open_agent"]

AGENT_ID: Final = "coding-agent"
MANIFEST_PLUGIN: Final = "coding-agent-workspace"
"""The name `open_agent` registers the workspace's `turn_manifest` plugin under."""
INSTRUCTIONS: Final = (
    "You are a careful coding agent working in one workspace directory. Use "
    "the tools to read, write and run things there. A tool result marked "
    "[interrupted] means the call may or may not have taken effect: inspect "
    "the workspace before repeating it."
)


def choose_model() -> tuple[Model, str]:
    """The configured model and a description of it for humans."""
    from turnkeep.agent.openai_compat import OpenAIConfig, OpenAIModel

    config = OpenAIConfig.from_env()
    if config is None:
        return scripted_model(), "scripted (offline)"
    return OpenAIModel(config), f"{config.model} at {config.base_url}"


async def open_agent(
    host: Host,
    workspace: Workspace,
    *,
    model: Model,
    session_id: str | None = None,
    continue_turn: bool = False,
    accept_context_change: bool = False,
    accept_drift: bool = False,
    on_event: Callable[[SessionEvent], None] | None = None,
    wrap: Callable[[Sequence[Tool]], Sequence[Tool]] = lambda tools: tools,
) -> AgentLoop:
    """Start a new session, or resume (and recover) a stored one.

    A stored session whose recorded run context (model, tools, instructions,
    budgets) differs from this process's is refused with
    `ContextMismatchError` unless `accept_context_change`, which runs with
    the new context and records the change (`context="override"`).

    Each turn's end names the workspace's tree hash (`coding_agent.manifest`:
    one plugin per host, tracking each session's workspace); a stored
    session whose workspace changed since is refused with
    `ManifestDriftError` unless `accept_drift`, which records the change
    (`drift="record"`) and goes on.
    """
    manifest = host.pm.get_plugin(MANIFEST_PLUGIN)
    if not isinstance(manifest, WorkspaceManifest):
        manifest = WorkspaceManifest(store_paths(host.config.backends))
        host.register(manifest, name=MANIFEST_PLUGIN)
    tools = wrap(workspace_tools(workspace))
    if session_id is None:
        loop = AgentLoop.create(
            AGENT_ID,
            host=host,
            model=model,
            tools=tools,
            instructions=INSTRUCTIONS,
            on_event=on_event,
        )
        manifest.track(loop.session_id, workspace.root)
        return loop
    manifest.track(session_id, workspace.root)  # the resume checks it
    return await AgentLoop.resume(
        AGENT_ID,
        session_id,
        host=host,
        model=model,
        tools=tools,
        continue_turn=continue_turn,
        instructions=INSTRUCTIONS,
        context="override" if accept_context_change else "check",
        drift="record" if accept_drift else "refuse",
        on_event=on_event,
    )
