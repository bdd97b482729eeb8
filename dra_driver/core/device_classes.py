"""The DeviceClasses, generated from the family registry (pure).

Every family gets its class `<family>.tessera.dev`, selecting its `type`; a family with profiles
(`DeviceFamily.class_profiles`: MIG) also one class per profile, for extended resources. `python -m
dra_driver.core.device_classes` prints what deploy/render-manifests.sh writes: the plain manifests in
deviceclasses/ (`list`, `manifest <file>`) and the list the chart's templates range over (`chart`:
deploy/helm/tessera/files/families.yaml). Tests fail when any of them differs from what the registry says,
so adding a family is adding its module and running the script. docs/architecture.md, "The family seam".
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver.core import families
from dra_driver.core.families.base import ClassVariant
from dra_driver.core.families.protocol import AnyFamily
from dra_driver.vocabulary.names import (
    ATTRIBUTE_DOMAIN,
    CONFIG_API_VERSION,
    DRIVER_NAME,
    Attr,
    class_label,
    device_class_name,
    profile_class_name,
)

WIDTH = 110
GENERATED = (
    "# Generated from the family registry (dra_driver/core/families) by\n"
    "# `python -m dra_driver.core.device_classes` (deploy/render-manifests.sh); do not edit.\n"
)
CHART_FILE = "families.yaml"


def _comment(text: str) -> str:
    lines = textwrap.wrap(text, WIDTH, initial_indent="# ", subsequent_indent="# ")
    return "".join(f"{line}\n" for line in lines)


def _class(name: str, labels: Sequence[str], selects: Sequence[str], resource: str) -> str:
    expression = " &&\n        ".join(selects)
    return (
        "apiVersion: resource.k8s.io/v1\n"
        "kind: DeviceClass\n"
        "metadata:\n"
        f"  name: {name}\n"
        "  labels:\n"
        "    app.kubernetes.io/part-of: tessera\n" + "".join(f"    {label}\n" for label in labels) + "spec:\n"
        "  selectors:\n"
        "  - cel:\n"
        "      expression: >-\n"
        f"        {expression}\n"
        f"  extendedResourceName: {DRIVER_NAME}/{resource}\n"
    )


def _selects(family: AnyFamily) -> list[str]:
    return [
        f'device.driver == "{DRIVER_NAME}"',
        f'device.attributes["{ATTRIBUTE_DOMAIN}"].{Attr.TYPE} == "{family.name}"',
    ]


def family_class(family: AnyFamily) -> str:
    """deviceclasses/<family>.yaml."""
    return (
        GENERATED
        + _comment(f"Tessera DeviceClass: {family.class_meaning}")
        + _comment(
            f"`resources.limits: {{{DRIVER_NAME}/{family.name}: 1}}` in a container asks for one such device "
            "without a claim."
        )
        + _class(device_class_name(family.name), (), _selects(family), family.name)
    )


def variant_class(family: AnyFamily, variant: ClassVariant) -> str:
    """deviceclasses/<family>-<variant>.yaml: some of the family's devices, with a config the class sets."""
    parameters = {"apiVersion": CONFIG_API_VERSION, "kind": family.config.kind, **variant.config}
    expression = " &&\n        ".join([*_selects(family), variant.selects])
    return (
        GENERATED + _comment(f"Tessera DeviceClass: {variant.meaning}") + "apiVersion: resource.k8s.io/v1\n"
        "kind: DeviceClass\n"
        "metadata:\n"
        f"  name: {variant_class_name(family, variant)}\n"
        "  labels:\n"
        "    app.kubernetes.io/part-of: tessera\n"
        "spec:\n"
        "  selectors:\n"
        "  - cel:\n"
        "      expression: >-\n"
        f"        {expression}\n"
        "  config:\n"
        "  - opaque:\n"
        f"      driver: {DRIVER_NAME}\n"
        "      parameters:\n" + "".join(f"        {k}: {json.dumps(v)}\n" for k, v in parameters.items())
    )


def variant_class_name(family: AnyFamily, variant: ClassVariant) -> str:
    return f"{family.name}-{variant.name}.tessera.dev"


def profile_classes(family: AnyFamily) -> str:
    """deviceclasses/<family>-profiles.yaml: a class per profile, selecting the family's devices of it."""
    example = class_label(family.class_profiles()[0])
    docs = [
        GENERATED
        + _comment(
            f"One DeviceClass per profile of the {family.name} family, so that `resources.limits: "
            f"{{{DRIVER_NAME}/{family.name}-{example}: 1}}` works without writing a claim; `+` in a profile "
            "is spelled `-` in names."
        )
    ]
    for profile in family.class_profiles():
        label = class_label(profile)
        docs.append(
            _class(
                profile_class_name(family.name, profile),
                (f"{DRIVER_NAME}/{family.name}-profile: {label}",),
                [*_selects(family), f'device.attributes["{ATTRIBUTE_DOMAIN}"].{Attr.PROFILE} == "{profile}"'],
                f"{family.name}-{label}",
            )
        )
    return "---\n".join(docs)


def manifests(registry: Sequence[AnyFamily] | None = None) -> dict[str, str]:
    """deviceclasses/' files of DeviceClasses, by name."""
    out: dict[str, str] = {}
    for f in registry if registry is not None else families.FAMILIES:
        out[f"{f.name}.yaml"] = family_class(f)
        if f.class_profiles():
            out[f"{f.name}-profiles.yaml"] = profile_classes(f)
        for v in f.class_variants:
            out[f"{f.name}-{v.name}.yaml"] = variant_class(f, v)
    return out


def chart_families(registry: Sequence[AnyFamily] | None = None) -> str:
    """The chart's files/families.yaml: what its templates make DeviceClasses of and check node groups by."""
    lines = [
        GENERATED.rstrip("\n"),
        "# templates/deviceclasses.yaml makes each family's DeviceClass, and with `profiles` one per profile",
        "# listed under that key of deviceClasses in values.yaml; templates/daemonset.yaml checks",
        "# nodeGroups[].families against the names, and copies a group's `settings` keys (the family's node",
        "# settings) into its NodeSettings; `formerly` maps a renamed setting's former key to its key (both",
        "# are read; a group giving both must give one value). templates/deviceclasses.yaml also makes a",
        "# class `<family>-<name>.tessera.dev` of each of a family's `variants`: its devices that meet",
        "# `selects`, with `config` set in the family's config `kind`.",
        "families:",
    ]
    for f in registry if registry is not None else families.FAMILIES:
        lines.append(f"- name: {f.name}")
        if f.class_profiles():
            lines.append(f"  profiles: {f.name}Profiles")
        if f.settings:
            lines.append(f"  settings: [{', '.join(k for s in f.settings for k in s.keys)}]")
        former = [f"{old}: {s.key}" for s in f.settings for old in s.former_keys]
        if former:
            lines.append(f"  formerly: {{{', '.join(former)}}}")
        if f.class_variants:
            lines.append(f"  kind: {f.config.kind}")
            lines.append("  variants:")
        for v in f.class_variants:
            lines.append(f"  - name: {v.name}")
            lines.append(f"    selects: {json.dumps(v.selects)}")
            lines.append(f"    config: {json.dumps(dict(v.config))}")
    return "\n".join(lines) + "\n"


def chart_schema(schema: Mapping[str, Any], registry: Sequence[AnyFamily] | None = None) -> dict[str, Any]:
    """The chart's values.schema.json with nodeGroups[]'s family settings as the families declare them
    (the rest of the file is kept as it is)."""
    out: dict[str, Any] = json.loads(json.dumps(schema))
    group = out["properties"]["nodeGroups"]["items"]["properties"]
    chosen = registry if registry is not None else families.FAMILIES
    declared = {key: s for f in chosen for s in f.settings for key in s.keys}
    generated = set(out.get("x-tessera-family-settings", []))
    for key in generated - set(declared):
        group.pop(key, None)
    for key, setting in declared.items():
        said = setting.meaning if key == setting.key else f"{setting.key}'s former name, still read"
        group[key] = {"description": said, **setting.schema}
    out["x-tessera-family-settings"] = sorted(declared)
    return out


def main(argv: Sequence[str]) -> int:
    what, rest = (argv[0], argv[1:]) if argv else ("", [])
    files = manifests()
    if what == "chart" and not rest:
        sys.stdout.write(chart_families())
    elif what == "schema" and not rest:
        sys.stdout.write(json.dumps(chart_schema(json.load(sys.stdin)), indent=2) + "\n")
    elif what == "list" and not rest:
        sys.stdout.write("".join(f"{name}\n" for name in files))
    elif what == "manifest" and len(rest) == 1 and rest[0] in files:
        sys.stdout.write(files[rest[0]])
    else:
        sys.stderr.write(
            "usage: python -m dra_driver.core.device_classes chart | schema < values.schema.json | list | "
            "manifest <file>\n"
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
