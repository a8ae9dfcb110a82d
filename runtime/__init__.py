"""The engine: agents as asyncio tasks, the StepFrame runner, the action dispatcher."""
