{
    "flavor_access": []
}