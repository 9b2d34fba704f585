"""ablate: small, honest training experiments turned into decisions about big ones."""

__version__ = "0.1.0"
