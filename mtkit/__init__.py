"""mtkit: neural machine translation from the command line.

Python use: ``mtkit.Translator.load("model.pt", beam=5).translate(["Hola."])``
(see mtkit/decode/translate.py). `import mtkit` stays cheap: torch is imported only when the
Translator is first used.
"""

from mtkit.version import __version__

__all__ = ["Translator", "__version__"]


def __getattr__(name: str):
    if name == "Translator":
        from mtkit.decode.translate import Translator

        return Translator
    raise AttributeError(f"module 'mtkit' has no attribute {name!r}")
