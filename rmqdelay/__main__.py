from rmqdelay.commands.main import main

main()
