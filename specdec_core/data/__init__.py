"""What the library reads at run time, shipped inside the package (read with importlib.resources,
so it works from a checkout and from an installed wheel alike): the distilled draft for the
embedded target (`draft/`), the bench's prompt sets, and the recorded example traces the app shows
first (`examples/`)."""
from importlib import resources
from importlib.abc import Traversable


def file(*parts: str) -> Traversable:
    """A shipped file or folder, e.g. file("draft") or file("examples", "example_plain.trace.json")."""
    return resources.files(__name__).joinpath(*parts)
