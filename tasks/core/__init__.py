"""Shared by every stage: the artifact store, the manifests tasks pass, content cache keys."""
