"""The country of a client address, for the ``country`` condition of link rules.

The data is the Regional Internet Registries' delegation statistics (ARIN, RIPE
NCC, APNIC, LACNIC, AFRINIC), compiled into the ``iptocc`` package's wheel
(MIT or Apache-2.0, rebuilt from the registries nightly; the data is as old as
the installed release). Nothing is downloaded at run time and no licence key is
needed. A block's country is the one it was *assigned* to, not where it is
used: that agrees with commercial databases for about 95% of IPv4 addresses.

The table is loaded on the first lookup (about 1.5 ms and 0.6 MB, once per
process); a lookup then takes well under a microsecond.

Which address is the client's (forwarded headers, ``SLUICE_TRUSTED_PROXIES``)
is decided by ``sluice.http.client_address.client_ip``, not here.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@functools.cache
def _lookup() -> Callable[[str], str | None]:
    import iptocc  # the table sits in the extension module: importing it loads the data

    return iptocc.country_code


def warm_up() -> None:
    """Load the table now, not on the first redirect that needs it."""
    _lookup()("192.0.2.1")


def country_of(address: Address | str | None) -> str | None:
    """The ISO 3166-1 alpha-2 code (upper case) of a public address; None for private,
    loopback, link-local, reserved or unassigned addresses and for anything unparsable."""
    if address is None:
        return None
    if isinstance(address, str):
        try:
            address = ipaddress.ip_address(address.strip())
        except ValueError:
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if not address.is_global:
        return None
    code = _lookup()(str(address))
    # The registries also use "EU" and "AP" for blocks of a whole region: no country.
    return code if code is not None and code not in _REGIONS else None


_REGIONS = frozenset({"EU", "AP"})
