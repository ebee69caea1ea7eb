# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Named records without ``collections``.

``collections.namedtuple`` costs about 2 ms to import (``collections`` pulls in ``operator``, ``keyword``,
``reprlib``, ``itertools``), and the runtime shim imports the driver-file and ld.so.cache records in every GPU
container start. A record is a tuple with read-only named fields: it compares, hashes, sorts and unpacks as the
tuple of its values, and takes its values by position or by field name.

Standard library only (target Pythons 3.8+).
"""

from __future__ import annotations


def record(name: str, fields: tuple[str, ...], doc: str = "") -> type:
    """A tuple subclass called ``name`` with one read-only attribute per field, in order."""
    fields = tuple(fields)
    if len(set(fields)) != len(fields) or not all(f.isidentifier() and not f.startswith("_") for f in fields):
        raise ValueError(f"{name}: field names must be distinct identifiers not starting with _: {fields!r}")

    def __new__(cls: type, *args: object, **kwargs: object) -> tuple:
        if len(args) > len(fields):
            raise TypeError(f"{name}() takes {len(fields)} values, got {len(args)}")
        values = list(args)
        for field in fields[len(args) :]:
            if field not in kwargs:
                raise TypeError(f"{name}() is missing {field!r}")
            values.append(kwargs.pop(field))
        if kwargs:
            raise TypeError(f"{name}() got unknown or repeated fields {sorted(kwargs)}")
        return tuple.__new__(cls, values)

    def __repr__(self: tuple) -> str:
        return name + "(" + ", ".join(f"{field}={value!r}" for field, value in zip(fields, self)) + ")"

    def __getnewargs__(self: tuple) -> tuple:
        return tuple(self)

    namespace: dict[str, object] = {
        "__slots__": (),
        "__doc__": doc or f"{name}({', '.join(fields)})",
        "_fields": fields,
        "__new__": __new__,
        "__repr__": __repr__,
        "__getnewargs__": __getnewargs__,
    }
    for index, field in enumerate(fields):
        namespace[field] = property(lambda self, i=index: tuple.__getitem__(self, i), doc=f"{field} (value {index})")
    return type(name, (tuple,), namespace)
