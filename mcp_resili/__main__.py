from mcp_resili.cli import main

raise SystemExit(main())
