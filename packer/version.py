"""The version of packer, written into every manifest and shown by --version."""

__version__ = "0.1.0"
