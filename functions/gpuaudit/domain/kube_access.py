"""How the auditor is allowed to read an EKS cluster's Kubernetes API (issue #33): the names both the stack and the
texts that explain a refused read use.

EKS access entries of the auditor's roles carry READER_GROUP and no EKS access policy (AmazonEKSViewPolicy mirrors
the namespaced `view` role and grants no `nodes`); the shipped manifest RBAC_MANIFEST binds READER_GROUP to the
ClusterRole READER_ROLE: get/list/watch on nodes and events, nothing else.
"""

from __future__ import annotations

READER_GROUP = "gpuaudit-readers"
READER_ROLE = "gpuaudit-reader"
RBAC_MANIFEST = "deploy/kubernetes/gpuaudit-reader.yaml"
