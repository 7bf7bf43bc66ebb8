"""A tiny verifiers 0.4 environment, written as a verifiers user would (a taskset package that
exports its Taskset and its Harness), for rlvr's adapter tests: two-turn arithmetic.

The harness is a chat loop run in-process (verifiers allows it: every model call goes through
the interception ``endpoint`` with the rollout's ``secret``): it asks the task's question, then
asks the model to check its answer, then ends. The task's rewards: ``correct`` (the last reply
holds the answer; it raises with ``broken: true``) and ``turns`` (0.5 per model reply, a
number the tests can predict).
"""

from __future__ import annotations

import httpx
import verifiers.v1 as vf


class ArithData(vf.TaskData):
    answer: str
    broken: bool = False


class ArithTask(vf.Task[ArithData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def correct(self, task: ArithData, trace: vf.Trace) -> float:
        if task.broken:
            raise ValueError("the grader broke")
        return 1.0 if task.answer in trace.last_reply else 0.0

    @vf.reward(weight=0.5)
    async def turns(self, trace: vf.Trace) -> float:
        return float(len(trace.assistant_messages))


class ArithTasksetConfig(vf.TasksetConfig):
    size: int = 4
    system_prompt_text: str = "You add numbers."
    broken: bool = False


class ArithTaskset(vf.Taskset[ArithTask, ArithTasksetConfig]):
    def load(self):
        for a in range(self.config.size):
            yield ArithTask(
                ArithData(
                    prompt=f"What is {a} + {a + 1}?",
                    system_prompt=self.config.system_prompt_text,
                    answer=str(2 * a + 1),
                    broken=self.config.broken,
                ),
                self.config.task,
            )


class ArithHarnessConfig(vf.HarnessConfig):
    follow_up: str = "Check it: reply with the number only."


class ArithHarness(vf.Harness[ArithHarnessConfig]):
    """Two chat turns, in-process: the question, then a follow-up user turn."""

    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, **_):
        system, prompt = self.resolve_prompt(data)
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": prompt})
        async with httpx.AsyncClient(timeout=60) as client:
            for follow_up in (self.config.follow_up, None):
                reply = await client.post(
                    f"{endpoint}/chat/completions",
                    headers={"Authorization": f"Bearer {secret}"},
                    json={"model": ctx.model, "messages": messages},
                )
                if reply.status_code != 200:
                    return vf.ProgramResult(1, "", reply.text)
                message = reply.json()["choices"][0]["message"]
                messages.append({"role": "assistant", "content": message["content"]})
                if follow_up is not None:
                    messages.append({"role": "user", "content": follow_up})
        return vf.ProgramResult(0, "", "")


__all__ = ["ArithHarness", "ArithTaskset"]
