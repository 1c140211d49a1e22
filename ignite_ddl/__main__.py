from ignite_ddl.cli import run

if __name__ == "__main__":
    run()
