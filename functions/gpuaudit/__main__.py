from gpuaudit.launcher import main

main()
