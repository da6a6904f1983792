from rewardserve.cli.main import main

main()
