"""`python -m mtkit`, which is how torchrun starts it: torchrun --nproc_per_node N -m mtkit ..."""

from mtkit.cli import main

if __name__ == "__main__":
    main()
