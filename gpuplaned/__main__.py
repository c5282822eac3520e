from gpuplaned.cli import main

raise SystemExit(main())
