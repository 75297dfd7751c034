"""Shared test support: real servers and test doubles started on 127.0.0.1."""
