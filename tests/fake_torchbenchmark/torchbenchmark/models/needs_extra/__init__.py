"""A model whose own requirement is missing, as a checkout without `python install.py` has it."""

import not_installed_requirement_of_needs_extra  # noqa: F401
