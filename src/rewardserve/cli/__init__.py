"""The ``rewardserve`` command line: light at import (the standard library and the
client); each command imports what it needs when it runs, so a client-only install has
``--help``, ``paths`` and ``score --url``, and ``serve`` says which extra to install."""
