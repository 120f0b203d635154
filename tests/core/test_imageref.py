"""OCI image references: the grammar the program's config and the policy pack share."""

from __future__ import annotations

import pytest
from vke_gpu_dra_core import imageref

DIGEST = "sha256:" + "0" * 64


@pytest.mark.parametrize(
    ("text", "repository", "tag", "digest", "domain"),
    [
        ("busybox:1.37", "busybox", "1.37", "", "docker.io"),
        (
            "cr1-cn-beijing.cr.volces.com/ns/repo:0.1.0",
            "cr1-cn-beijing.cr.volces.com/ns/repo",
            "0.1.0",
            "",
            "cr1-cn-beijing.cr.volces.com",
        ),
        (f"localhost:5000/a/b@{DIGEST}", "localhost:5000/a/b", "", DIGEST, "localhost"),
        (f"r.io/a/b:v1@{DIGEST}", "r.io/a/b", "v1", DIGEST, "r.io"),
        ("Registry.IO:443/a__b/c-d.e:tag_1", "Registry.IO:443/a__b/c-d.e", "tag_1", "", "registry.io"),
    ],
)
def test_parses_valid_references(text: str, repository: str, tag: str, digest: str, domain: str) -> None:
    ref = imageref.parse(text)
    assert (ref.repository, ref.tag, ref.digest, ref.domain) == (repository, tag, digest, domain)
    assert str(ref) == text


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("UPPER/case:tag", "lower-case"),
        ("repo@sha256:short", "64 lower-case hex"),
        (f"repo@sha512:{'0' * 64}", "sha256:"),
        ("repo", "a tag (repo:tag) or a digest"),
        ("repo:", "tag ''"),
        ("repo:" + "t" * 129, "1-128"),
        ("-bad.io/x:1", "registry '-bad.io'"),
        (" busybox:1", "without spaces"),
        ("", "without spaces"),
        ("a//b:1", "repository path"),
    ],
)
def test_rejects_invalid_references(text: str, why: str) -> None:
    with pytest.raises(imageref.ImageReferenceError, match=None) as info:
        imageref.parse(text)
    assert why in str(info.value)


def test_placeholder_and_local_domains() -> None:
    assert imageref.domain_problem("registry.example.com", local_cluster=True)
    assert imageref.domain_problem("EXAMPLE.ORG", local_cluster=True)
    assert imageref.domain_problem("example.net", local_cluster=False)
    assert imageref.domain_problem("myexample.com", local_cluster=False) is None
    assert imageref.domain_problem("localhost", local_cluster=True) is None
    assert "local machine" in (imageref.domain_problem("localhost", local_cluster=False) or "")
    assert imageref.domain_problem("cr1-cn-beijing.cr.volces.com", local_cluster=False) is None
