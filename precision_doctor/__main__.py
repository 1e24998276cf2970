from precision_doctor.cli import main

main()
