"""The chain around a session's step and tool phase (runtime/session/intercept.py):
the built-in path innermost, a profile's hooks around it, a replay outermost."""
import asyncio

from runtime.session import intercept


class Hooks:
    def __init__(self, wait: bool):
        self.wait, self.asked = wait, 0

    async def before_step(self, agent):
        self.asked += 1
        return self.wait


class Agent:
    def __init__(self, wait: bool = False):
        self.hooks = Hooks(wait)


class Replayer:
    def __init__(self, stop: bool):
        self.stop, self.served, self.woke = stop, [], 0

    async def before_step(self, agent):
        return self.stop

    async def serve_calls(self, agent, iteration, rows, unwritten):
        self.served.append([r["id"] for r in unwritten])
        return [dict(r, status="success") if r["id"] in {u["id"] for u in unwritten} else r for r in rows]

    async def wake(self, agent):
        self.woke += 1
        return True


def test_without_a_replay_the_profile_hooks_decide_and_calls_pass_untouched():
    chain, agent = intercept.chain(None), Agent(wait=True)
    assert asyncio.run(chain.before_step(agent)) is True and agent.hooks.asked == 1
    rows = [{"id": "a", "status": "pending"}]
    assert asyncio.run(chain.calls_loaded(agent, 1, rows, rows, set())) == (rows, rows)


def test_a_replay_stopping_comes_before_the_profile_hooks_and_serves_unwritten_calls():
    replayer, agent = Replayer(stop=True), Agent()
    chain = intercept.chain(replayer)
    assert asyncio.run(chain.before_step(agent)) is True and agent.hooks.asked == 0  # the hooks never looked
    replayer.stop = False
    assert asyncio.run(chain.before_step(agent)) is False and agent.hooks.asked == 1
    rows = [{"id": "a", "status": "pending"}, {"id": "b", "status": "ended"}]
    served, changed = asyncio.run(chain.calls_loaded(agent, 1, rows, rows[:1], stored={"b"}))
    assert replayer.served == [["a"]] and changed == [{"id": "a", "status": "success"}] and served[1] == rows[1]
    assert asyncio.run(chain.woken(agent)) is True and replayer.woke == 1
