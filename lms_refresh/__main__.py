from lms_refresh.cli import main

main()
