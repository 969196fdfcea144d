"""torchbench models that download pretrained weights, on a host that cannot reach them.

Thirteen of the models on PyTorch's CPU list (the twelve torchvision models and Super_SloMo,
whose loss uses VGG16) ask torchvision for ImageNet weights when they are built, and a host
without internet fails there with a bare `<urlopen error ...>`. A benchmark measures speed and
compares compiled against eager on the same weights, so random weights answer the same
questions, as the built-in models are built: when a build fails because a download could not
be reached and torchvision's weights were what it was fetching, the model is built again with
torchvision's weights left out (`WeightsEnum.verify` answering None, which is torchvision's own
"no weights"), and the record says so. A download that is not torchvision's is one line naming
what could not be reached and what to do.
"""

from __future__ import annotations

import contextlib
import socket
import urllib.error
from typing import Any, Iterator
from unittest import mock

NETWORK_ERRORS = (urllib.error.URLError, ConnectionError, TimeoutError, socket.gaierror)


class DownloadUnreachable(RuntimeError):
    """A model's build downloads something this host cannot reach, and no fallback exists."""


def unreachable(exc: BaseException) -> BaseException | None:
    """The network error behind `exc` (itself, its cause or its context), or None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, NETWORK_ERRORS):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


@contextlib.contextmanager
def torchvision_downloads() -> Iterator[list[str]]:
    """The URLs torchvision's weights are fetched from while the block runs."""
    from torchvision.models._api import WeightsEnum

    urls: list[str] = []
    fetch = WeightsEnum.get_state_dict

    def recording(self: Any, *args: Any, **kwargs: Any) -> Any:
        urls.append(self.url)
        return fetch(self, *args, **kwargs)

    with mock.patch.object(WeightsEnum, "get_state_dict", recording):
        yield urls


@contextlib.contextmanager
def without_torchvision_weights() -> Iterator[None]:
    """torchvision builders build with random weights inside the block, whatever they are asked."""
    from torchvision.models._api import WeightsEnum

    with mock.patch.object(WeightsEnum, "verify", classmethod(lambda cls, obj: None)):
        yield
