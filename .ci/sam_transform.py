"""Print template.yaml as CloudFormation deploys it: the SAM transform, applied offline.

Run with the deploy venv's Python (aws-sam-translator): ``python .ci/sam_transform.py
template.yaml``. Local ``CodeUri``/``ContentUri`` paths become placeholder S3 URIs (what ``sam
package`` would put there), so no AWS call and no build is needed. checkov reads the result, so
the resources SAM generates (roles, permissions, the API's stage) are checked too.

A SAM resource's ``Metadata`` reaches the function SAM generates from it, but not the stage SAM
generates for an ``AWS::Serverless::Api``: the API's inline checkov justifications are copied to
the ``AWS::ApiGateway::*`` resources generated from it, so they apply where the checks land.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse


class _NoManagedPolicies:
    """The template names no managed policy by name, so there is nothing to look up."""

    def load(self) -> dict[str, str]:
        return {}


def main(path: str) -> None:
    with open(path) as file:
        template: dict[str, Any] = yaml_parse(file.read())
    for resource in template["Resources"].values():
        props = resource.get("Properties", {})
        for key in ("CodeUri", "ContentUri"):
            if isinstance(props.get(key), str) and not props[key].startswith("s3://"):
                props[key] = "s3://placeholder/" + props[key].strip("/")
    apis = {name: r["Metadata"]["checkov"] for name, r in template["Resources"].items()
            if r["Type"] == "AWS::Serverless::Api" and "checkov" in r.get("Metadata", {})}
    out = transform(template, {}, _NoManagedPolicies())
    for name, resource in out["Resources"].items():
        owner = next((api for api in apis if name.startswith(api)), None)
        if owner is not None and resource["Type"].startswith("AWS::ApiGateway::"):
            resource.setdefault("Metadata", {})["checkov"] = apis[owner]
    json.dump(out, sys.stdout, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
