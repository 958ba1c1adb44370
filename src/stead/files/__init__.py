"""A workspace's files, knowing no run and no store: a directory as a
content-addressed tree (`trees`), where its symbolic links lead (`links`),
what git says of it (`gittrees`), and blobs kept outside the database
(`blobs`)."""
