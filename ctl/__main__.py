from gpuplanectl.main import main

raise SystemExit(main())
