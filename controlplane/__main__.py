from controlplane.main import main

main()
