"""The catalogs a server is built from: flavors, images and who may use an image (its members).

Each is a registry over the API database with its own find / create / delete and views; the front
door (``novakit.compute``) reads them when it checks a request, the conductor when it builds. Key
pairs (``novakit.keypairs``) and security groups (``novakit.network``) are catalogs too, kept
beside what they belong to.
"""
