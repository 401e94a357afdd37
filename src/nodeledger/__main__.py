from nodeledger.cli import main

raise SystemExit(main())
