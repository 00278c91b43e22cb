from specguard.cli import main

main()
