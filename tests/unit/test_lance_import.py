"""store/lance_import.py: LanceDB is imported without building the validators of
the REST client it carries, and pydantic's decorator is itself again afterwards."""
import json
import subprocess
import sys

import pydantic
import pytest
from pydantic._internal._validate_call import ValidateCallWrapper

from store.lance_import import deferred_validate_call
from tests.harness import ROOT


def validator_built(fn) -> bool:
    """Whether pydantic has built the validator of a function it decorated with validate_call."""
    wrapper = next(cell.cell_contents.__self__ for cell in fn.__closure__
                   if isinstance(getattr(cell.cell_contents, "__self__", None), ValidateCallWrapper))
    return wrapper.__pydantic_complete__


def test_a_deferred_validator_is_built_on_first_call_and_validates_as_before():
    original = pydantic.validate_call
    with deferred_validate_call():
        @pydantic.validate_call
        def twice(x: int) -> int:
            return 2 * x

        @pydantic.validate_call(validate_return=True)
        def text(x: int) -> str:
            return x
    assert pydantic.validate_call is original
    assert not validator_built(twice) and not validator_built(text)
    assert twice("3") == 6  # arguments converted as pydantic does
    assert validator_built(twice)
    with pytest.raises(pydantic.ValidationError):
        twice("three")
    with pytest.raises(pydantic.ValidationError):  # the return value is still checked
        text(3)

    @pydantic.validate_call
    def after(x: int) -> int:
        return x
    assert validator_built(after), "outside the block, validate_call builds at once as it always did"


CHECK = """
import json, sys
sys.path.insert(0, {root!r})
import store  # what agents.py, app.py and every tool of the service import first
import pydantic, pydantic.validate_call_decorator
from lance_namespace_urllib3_client.api.table_api import TableApi
from tests.unit.test_lance_import import validator_built
print(json.dumps({{"built": validator_built(TableApi.describe_table),
                  "restored": pydantic.validate_call is pydantic.validate_call_decorator.validate_call}}))
"""


def test_importing_the_store_leaves_the_rest_clients_validators_unbuilt():
    """In a fresh process, as agents.py and app.py start (the pytest process may
    have imported lancedb some other way first)."""
    done = subprocess.run([sys.executable, "-c", CHECK.format(root=ROOT)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {"built": False, "restored": True}
