"""Payloads as stead stores them: large values kept in a blob store and
stored as references (`references`, over `blobs`)."""
